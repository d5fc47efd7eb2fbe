"""The package's shape: a handful of stage packages at the top, modules small
enough to read, no import circle (among modules, and among the stage packages),
no two modules with the same file name, a thin CLI, vLLM imported by the harness only;
the stage order true at run time (a stage imported alone pulls in no later stage, and no
stage is handed a later stage's code); functions short, with few parameters."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gdn_review"
MAX_LINES = 500
MAX_CLI_LINES = 400
MAX_TOP_ENTRIES = 12  # besides __init__.py
# The pipeline, in the order data flows (docs/layout.md draws it); "common" is shared by all.
STAGES = [
    "common",
    "kb",
    "importers",
    "generate",
    "harness",
    "run",
    "report",
    "matrix",
    "mutation",
    "review",
    "export",
    "cli",
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every gdn_review module ``name`` imports, at its top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from package import submodule`` imports the submodule; any other name, the package.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_module_is_too_long():
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
    cli = len((PACKAGE / "cli" / "main.py").read_text().splitlines())
    assert cli < MAX_CLI_LINES, (
        f"cli/main.py has {cli} lines; its commands should call their stage's function"
    )


def test_no_two_modules_share_a_file_name():
    names = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            names[path.name].append(str(path.relative_to(PACKAGE.parent)))
    assert not {n: p for n, p in names.items() if len(p) > 1}


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ importing its own submodules is how a package is made;
    # only a submodule importing back up to a package that imports it closes a circle.
    circles = []

    def visit(node, trail):
        for nxt in sorted(graph[node]):
            if nxt in trail:
                cycle = trail[trail.index(nxt) :] + [nxt]
                if not all(b.startswith(a + ".") for a, b in zip(cycle, cycle[1:])):
                    circles.append(" -> ".join(cycle))
            elif nxt not in done:
                visit(nxt, trail + [nxt])
        done.add(node)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert not circles, "import circles:\n" + "\n".join(sorted(set(circles)))


def test_the_top_level_is_a_handful_of_stages():
    entries = sorted(
        p.name.removesuffix(".py")
        for p in PACKAGE.iterdir()
        if p.name not in ("__init__.py", "__pycache__")
    )
    assert len(entries) <= MAX_TOP_ENTRIES, (
        f"{len(entries)} entries at gdn_review/'s top: {entries}"
    )
    assert entries == sorted(STAGES), (
        f"the top of gdn_review/ is {entries}; docs/layout.md and STAGES name {sorted(STAGES)}"
    )
    loose = [
        p.name
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" and p.name not in ("__init__.py", "generate.py")
    ]
    assert not loose, f"loose modules at the top (put each in its stage's package): {loose}"


def test_every_import_points_leftward_in_the_pipeline():
    """A stage imports only stages to its left in STAGES (the order data flows), and common/;
    ``cli`` sits on top and may import any stage; ``common`` at the bottom imports none."""
    modules = _modules()
    known = set(modules)
    rightward = []
    for name, path in modules.items():
        stage = name.split(".")[1] if name.count(".") else None
        for target in _imports(name, path, known):
            other = target.split(".")[1] if target.count(".") else None
            if stage and other and STAGES.index(other) > STAGES.index(stage):
                rightward.append(f"{name} ({stage}) imports {target} ({other})")
    assert not rightward, "imports that point rightward in the pipeline:\n" + "\n".join(
        sorted(rightward)
    )


def test_only_the_harness_imports_vllm():
    offenders = []
    for name, path in _modules().items():
        if name.startswith("gdn_review.harness"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{name}: {t}" for t in targets if t == "vllm" or t.startswith("vllm.")]
    assert not offenders, offenders


# Calls that read, write or replace a file: only the evidence file's module may aim them at
# evidence.
FILE_CALLS = {
    "loads",
    "load",
    "read_text",
    "write_text",
    "read_bytes",
    "atomic_write",
    "replace",
    "open",
    "unlink",
}


def test_only_the_evidence_module_reads_or_writes_evidence():
    """A call that opens, writes or replaces a file named after evidence lives in
    run/evidence_file.py only."""
    offenders = []
    for name, path in _modules().items():
        if name == "gdn_review.run.evidence_file":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            function = (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            if function not in FILE_CALLS:
                continue
            aimed = [node.func.value] if isinstance(node.func, ast.Attribute) else []
            names = {
                n.id
                for part in aimed + node.args
                for n in ast.walk(part)
                if isinstance(n, ast.Name)
            }
            names |= {
                n.attr
                for part in aimed + node.args
                for n in ast.walk(part)
                if isinstance(n, ast.Attribute)
            }
            if any("evidence" in n.lower() for n in names) and not any(
                "evidence_file" == n for n in names
            ):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {function}()")
    assert not offenders, "evidence read or written outside run/evidence_file.py:\n" + "\n".join(
        offenders
    )


def _calls(tree: ast.AST):
    """(owner name, function name, node) of every call ``owner.function(...)`` or
    ``function(...)``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
                yield owner, node.func.attr, node
            elif isinstance(node.func, ast.Name):
                yield "", node.func.id, node


def test_child_processes_are_one_mechanism():
    """Children start through common/interrupts only; one module forks workers and waits on their
    pipes (and the preload server forks the Python children interrupts hands it);
    two modules set PYTHONPATH (a release tree's environment, the preload server's); one module
    fetches releases into the cache."""
    found: dict[str, set[str]] = defaultdict(set)
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for owner, function, node in _calls(tree):
            if owner == "subprocess" and function in {
                "run",
                "Popen",
                "call",
                "check_call",
                "check_output",
            }:
                found["starts a child without common/interrupts"].add(name)
            if (owner, function) in {("os", "fork"), ("interrupts", "fork"), ("select", "select")}:
                found["forks workers"].add(name)
            if owner == "release_cache" and function == "ensure":
                found["fetches a release"].add(name)
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                key = node.slice
            elif isinstance(node, ast.Dict):
                key = next(
                    (
                        k
                        for k in node.keys
                        if isinstance(k, ast.Constant) and k.value == "PYTHONPATH"
                    ),
                    None,
                )
            elif isinstance(node, ast.keyword) and node.arg == "PYTHONPATH":
                found["sets PYTHONPATH"].add(name)
            if isinstance(key, ast.Constant) and key.value == "PYTHONPATH":
                found["sets PYTHONPATH"].add(name)
    assert found["starts a child without common/interrupts"] <= {"gdn_review.common.interrupts"}, (
        found
    )
    assert found["forks workers"] <= {
        "gdn_review.common.forked",
        "gdn_review.common.interrupts",
        "gdn_review.common.preloaded",
    }, found
    # A release tree's children, and the preload server's own path (this checkout's gdn_review).
    assert found["sets PYTHONPATH"] <= {
        "gdn_review.common.release_trees",
        "gdn_review.common.preloaded",
    }, found
    assert found["fetches a release"] <= {"gdn_review.common.release_trees"}, found


def test_release_ranges_are_tested_in_one_place():
    """Only common/release_range.py reads a range with packaging's SpecifierSet; every stage asks
    it."""
    offenders = [
        name
        for name, path in _modules().items()
        if name != "gdn_review.common.release_range"
        and "SpecifierSet" in path.read_text(encoding="utf-8")
    ]
    assert not offenders, f"release ranges evaluated outside common/release_range.py: {offenders}"


def test_no_underscore_name_is_used_across_modules():
    """A name that starts with ``_`` is its module's own: no other module imports it or reaches
    it."""
    modules = _modules()
    known = set(modules)
    offenders = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        bound: set[str] = set()  # names this module binds to other gdn_review modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1]
                        + ([base] if base else [])
                    )
                if not base.startswith("gdn_review"):
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offenders.append(f"{name}: imports {base}.{alias.name}")
                    if f"{base}.{alias.name}" in known:
                        bound.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                bound |= {
                    alias.asname for alias in node.names if alias.name in known and alias.asname
                }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                offenders.append(f"{name}: uses {node.value.id}.{node.attr}")
    assert not offenders, "underscore names used across modules:\n" + "\n".join(
        sorted(set(offenders))
    )


def test_the_project_passes_its_own_ruff_settings():
    """``ruff check .`` (the generated modules and benchmarks too) and ``ruff format --check`` of
    the code written by hand, with pyproject.toml's settings (line length 100; the harness at
    vLLM's 88, gdn_review/harness/ruff.toml)."""
    import subprocess

    from tests.conftest import ROOT, dev_tool

    ruff = dev_tool("ruff", "ruff")
    for command in (["check", "."], ["format", "--check", "gdn_review", "tests", "benchmarks"]):
        done = subprocess.run(
            [ruff, *command, "--no-cache"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"


def test_each_stage_imported_alone_pulls_in_no_later_stage():
    """Every module of a stage imported in a fresh interpreter: no module of a stage to its right
    is loaded (what the import lines say is what happens at run time)."""
    modules = _modules()
    pulled = {}
    for stage in STAGES[:-1]:  # cli sits on top: nothing lies to its right
        mine = sorted(m for m in modules if m.startswith(f"gdn_review.{stage}"))
        code = (
            "import json, sys\n"
            + "".join(f"import {m}\n" for m in mine)
            + "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gdn_review.'))))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=PACKAGE.parent,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"importing {stage}/ alone:\n{done.stderr[-2000:]}"
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        later = set(STAGES[STAGES.index(stage) + 1 :])
        found = [m for m in loaded if m.split(".")[1] in later]
        if found:
            pulled[stage] = found
    assert not pulled, f"a stage imported alone pulled in later stages: {pulled}"


def _bindings(name: str, path: Path, tree: ast.AST, known: set[str]) -> dict[str, str]:
    """Local name -> ``module`` (the name is that gdn_review module) or ``module:attr`` (a name
    imported from it, or defined at the file's top), for every import in the file, at its top
    or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    local = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)} | {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }  # a parameter or variable of that name somewhere: not taken for the function
    bound = {
        node.name: f"{name}:{node.name}"
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.name not in local
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    bound[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base not in known:
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                bound[alias.asname or alias.name] = (
                    full if full in known else f"{base}:{alias.name}"
                )
    return bound


def _code_names(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the functions and classes it defines at its top (its code, as against its
    constants)."""
    return {
        name: {
            node.name
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        for name, path in modules.items()
    }


def _handed(expression: ast.AST, in_function: bool = False):
    """The names an argument hands over as code: a name itself, a ``module.attr`` of it, anything
    a lambda refers to; a call's result is data (its own arguments are looked at in turn)."""
    if isinstance(expression, ast.Lambda) or in_function:
        for node in ast.walk(expression):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                yield node.value.id, node.attr, node
            elif isinstance(node, ast.Name):
                yield node.id, None, node
        return
    if isinstance(expression, ast.Call):
        for argument in [*expression.args, *(k.value for k in expression.keywords)]:
            yield from _handed(argument)
    elif isinstance(expression, ast.Attribute) and isinstance(expression.value, ast.Name):
        yield expression.value.id, expression.attr, expression
    elif isinstance(expression, ast.Name):
        yield expression.id, None, expression
    else:
        for child in ast.iter_child_nodes(expression):
            yield from _handed(child)


def _stage_of(target: str) -> str | None:
    parts = target.split(":")[0].split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


# What a stage may be handed although it lies to the right: the CLI's printer, through which a
# stage says its progress (it calls nothing of the CLI's work, and is print's stand-in).
PRINTERS = {"gdn_review.cli.support:say"}


def test_no_stage_is_handed_a_later_stages_code():
    """No call passes a later stage's module, function or class to an earlier stage's function
    (e.g. the CLI handing ``review.diff_side`` to ``report/`` or ``matrix/``): that hides a runtime
    cycle the import lines do not show. Data flows right through files and return values."""
    modules = _modules()
    known, defines = set(modules), _code_names(modules)
    offenders = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound = _bindings(name, path, tree, known)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.value if isinstance(node.func, ast.Attribute) else node.func
            callee = bound.get(func.id) if isinstance(func, ast.Name) else None
            # common/ is the toolbox under every stage: what takes a function there (run it in a
            # forked child, with a timeout) knows no stage.
            if callee is None or _stage_of(callee) in (None, "common"):
                continue
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                for local, attr, reference in _handed(argument):
                    target = bound.get(local)
                    if target is None or _stage_of(target) is None or target in PRINTERS:
                        continue
                    module, _, imported = target.partition(":")
                    code = (
                        imported in defines.get(module, ())
                        if imported
                        else attr is None
                        or attr in defines.get(module, ())
                        or f"{module}.{attr}" in known
                    )
                    if code and STAGES.index(_stage_of(target)) > STAGES.index(_stage_of(callee)):
                        offenders.append(
                            f"{path.relative_to(PACKAGE.parent)}:{reference.lineno}: "
                            f"{ast.unparse(node.func)} ({_stage_of(callee)}) is handed "
                            f"{ast.unparse(reference)} ({_stage_of(target)})"
                        )
    assert not offenders, "a stage handed a later stage's code:\n" + "\n".join(sorted(offenders))


MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8
# The comment just above a function (or its decorators) that says why it is longer, or takes
# more, e.g. "# over 80 lines: one table of the record's fields, read top to bottom".
OVER_LINES = re.compile(r"#\s*over 80 lines[^:]*:\s*\w")
OVER_PARAMETERS = re.compile(r"#\s*over (?:80 lines and )?8 parameters[^:]*:\s*\w")


def _comment_above(lines: list[str], node: ast.AST) -> str:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    block = []
    while first > 0 and lines[first - 1].strip().startswith("#"):
        first -= 1
        block.insert(0, lines[first].strip())
    return " ".join(block)


def test_no_function_is_too_long_or_takes_too_many_parameters():
    """No function over 80 lines (its ``def`` to its end) or over 8 parameters (``self`` and
    ``cls`` aside) without a comment above it saying why (``# over 80 lines: ...``, ``# over 8
    parameters: ...``). A click command is exempt from the count of parameters, which are its
    options, and its docstring, which is its --help, is not counted in its lines."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            command = any(
                re.search(r"\b(command|group)\b", ast.unparse(d)) for d in node.decorator_list
            )
            length = node.end_lineno - node.lineno + 1
            docstring = node.body[0] if ast.get_docstring(node) is not None else None
            if command and docstring is not None:
                length -= docstring.end_lineno - docstring.lineno + 1
            arguments = node.args
            named = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            count = len([a for a in named if a.arg not in ("self", "cls")])
            count += (arguments.vararg is not None) + (arguments.kwarg is not None)
            why = _comment_above(lines, node)
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"
            if length > MAX_FUNCTION_LINES and not OVER_LINES.search(why):
                offenders.append(f"{where}: {length} lines")
            if count > MAX_PARAMETERS and not command and not OVER_PARAMETERS.search(why):
                offenders.append(f"{where}: {count} parameters")
    assert not offenders, (
        f"functions over {MAX_FUNCTION_LINES} lines or {MAX_PARAMETERS} parameters with no "
        "comment above saying why ('# over 80 lines: ...'):\n" + "\n".join(offenders)
    )
