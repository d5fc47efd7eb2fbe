"""The package's shape: a handful of stage packages at the top, modules small
enough to read, no import circle (among modules, and among the stage packages),
no two modules with the same file name, a thin CLI, vLLM imported by the harness only."""

from __future__ import annotations

import ast
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
    """``ruff check`` and ``ruff format --check`` of gdn_review/ and tests/ with pyproject.toml's
    settings (line length 100; the harness at vLLM's 88, gdn_review/harness/ruff.toml)."""
    import subprocess

    from tests.conftest import ROOT, dev_tool

    ruff = dev_tool("ruff", "ruff")
    for command in (["check"], ["format", "--check"]):
        done = subprocess.run(
            [ruff, *command, "--no-cache", "gdn_review", "tests"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"ruff {' '.join(command)}:\n{done.stdout}{done.stderr}"
