"""Which harness definitions an exported module copies, read from the harness's own source.

``gdn-review export`` writes no second copy of the harness: the definitions a
module needs (a real builder, a case -> ``build()`` inputs, the snapshot, and
per need the invariant properties, the CPU sync proxy, the field comparisons)
are read from ``gdn_review/harness/*.py`` with ``ast`` and copied verbatim,
with the imports they use, written in sections as ruff's isort writes them. Those
files import only the standard library, torch, pytest and vLLM (and each other), so
the copies run without gdn-review.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parent.parent / "harness"

# Harness definitions copied into every exported module, in this order:
# (file, relative to gdn_review/harness/, names of its top-level definitions).
HELPERS = (
    ("environment.py", ("prepare_platform",)),
    # Why a test skipped, which origin.py's skip marks (the harness's skips name one).
    ("../common/vocabulary.py", ("SkipKind",)),
    # Where an exception comes from (set-up: CouldNotRun; code under test: marked), which
    # builders.py, server.py, steps.py and case_build.py import: before them.
    ("origin.py", None),
    # How the harness sets up a release on this machine (making_config, accepted_kwargs,
    # set_field, which builders.py imports): all of it, as it grows with the releases.
    ("adaptations.py", None),
    # The tiny model configs and each speculation method's config, which builders.py imports.
    ("tiny_models.py", None),
    (
        "builders.py",
        (
            "BuilderSettings",
            "_accepted_kwargs",
            "make_vllm_config",
            "engine_config",
            "_set_after_config",
            "_vllm_platform_is_cuda",
            "as_on_server",
            "GDN_BUILDER_MODULE",
            "GDN_BUILDER",
            "family_modules",
            "builder_class",
            "make_builder",
            "new_builder",
            "mamba_spec",
        ),
    ),
    # What a stored form is (a tensor's parts, a missing field), which values.py imports.
    (
        "../common/snapshots.py",
        (
            "NO_FIELD",
            "TENSOR_KEYS",
            "explicit_form",
            "implied_shape",
            "tensor_parts",
            "tensor_change",
        ),
    ),
    # The current format's usual dtypes (values.py).
    ("../common/record_format.py", ("USUAL_DTYPES",)),
    ("values.py", None),
    ("server.py", None),
    # A call case's target called as the engine calls it (case_build.py imports it).
    ("declarations.py", None),
    ("inputs.py", None),
    ("steps.py", None),
    (
        "case_build.py",
        (
            "ENTRY_METHODS",
            "BuildRun",
            "settings_for",
            "_prefix_caching",
            "needs_own_builder",
            "skip_what_cannot_run",
            "_OpCounter",
            "_call_entry",
            "_second_builder",
            "_run_entry",
            "_run_after",
            "build_case",
            "_build_case",
            "_measure_parts",
            "_step_builders",
            "_build_step",
            "op_counts",
            "prepare_builders",
            "_builder_after",
        ),
    ),
)
# ...and what some modules need besides, by need: a check kind, or "snapshot"
# (the stored full-metadata snapshot is exported). None: every top-level
# definition of the file, in file order. A definition two needs share is copied once.
OPTIONAL_HELPERS = {
    # The seeded batches and every property.
    "invariant": (
        (
            "strategies.py",
            (
                "configured",
                "draw_batch",
                "seeded_batches",
                "_decode_row",
                "_every_row_kind",
                "_checkpoint_stride",
                "_stride_prefills",
                "boundary_batches",
            ),
        ),
        ("properties.py", None),
    ),
    # CUDA's sync count, and its CPU proxy (device-origin reads).
    "gpu_sync": (
        ("case_build.py", ("count_sync_warnings", "count_device_origin_reads")),
        ("sync_proxy.py", None),
    ),
    "differential": (("snapshot_compare.py", ("field_differences",)),),
    "snapshot": (("snapshot_compare.py", ("snapshot_differences",)),),
}


# Defined here because the helpers raise it too; callers import it from export.py.
class ExportError(Exception):
    """The record cannot be exported (not found, a draft, nothing applies, bad helpers)."""


# --- The harness's own source ----------------------------------------------------


def _definitions(path: Path) -> dict[str, str]:
    """Top-level definitions of a harness file: name -> source (decorators and the
    comment lines just above included), in file order."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    found: dict[str, str] = {}
    for node in ast.parse(text, filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = node.name
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            name = node.targets[0].id
        else:
            continue
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        while start > 1 and lines[start - 2].lstrip().startswith("#"):
            start -= 1
        found[name] = "".join(lines[start - 1 : node.end_lineno]).rstrip() + "\n"
    return found


def _module_imports(path: Path) -> dict[str, str]:
    """What a harness file imports at its top: bound name -> import statement.

    ``import x`` and ``from x import y`` of modules outside gdn-review (the
    harness files import each other; the export copies those definitions).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None and "." not in alias.name:
                    found[alias.name] = f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in ("gdn_review", "__future__"):
                continue
            for alias in node.names:
                bound = alias.asname or alias.name
                found[bound] = f"from {node.module} import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else ""
                )
    return found


def helper_groups(needs) -> tuple:
    """(file, names) of every harness definition a module with these needs copies, in order."""
    return HELPERS + tuple(
        group for need in sorted(needs) for group in OPTIONAL_HELPERS.get(need, ())
    )


def harness_helpers(needs, harness: Path = HARNESS) -> tuple[str, list[str]]:
    """The harness definitions an exported module needs, as source, and the import
    statements they use. ``needs``: check kinds of the module, and "snapshot"."""
    parts, seen, available = [], set(), {}
    for file_name, names in helper_groups(needs):
        path = harness / file_name
        definitions = _definitions(path)
        available |= _module_imports(path)
        chosen = list(definitions) if names is None else list(names)
        missing = [name for name in chosen if name not in definitions]
        if missing:
            raise ExportError(
                f"gdn_review/harness/{file_name} no longer defines "
                f"{', '.join(missing)} (see export_helpers.HELPERS)"
            )
        for name in chosen:
            if (file_name, name) not in seen:
                seen.add((file_name, name))
                parts.append(definitions[name])
    source = "\n\n".join(parts)
    used = _names_read(source)
    return source, sorted(statement for name, statement in available.items() if name in used)


def _names_read(source: str) -> set[str]:
    """The names the definitions read that they do not import themselves: a function that
    imports ``platform`` (or vLLM) in its body needs no import at the module's top."""
    used = set()
    for definition in ast.parse(source).body:
        nodes = list(ast.walk(definition))
        local = {
            (alias.asname or alias.name).split(".")[0]
            for node in nodes
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        used |= {node.id for node in nodes if isinstance(node, ast.Name)} - local
    return used


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
        lines += [
            f"from {module} import {', '.join(sorted(names))}"
            for module, names in sorted(froms[stdlib].items())
        ]
        sections.append(lines)
    return sections[0], sections[1]
