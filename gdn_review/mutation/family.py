"""The GDN builder's family as mutation and review see it: which file holds which builder
class, which records' tests run a file's code, and where a file's guard notes live.

The family is the loaded release's own (``harness.builders.family_modules``: every in-tree
subclass of ``GDNAttentionMetadataBuilder``, found by scanning the release's files). A
subclass file's code runs only under the cases that name one of its classes (``builder:``);
GDN's file runs under every case, the family's included (a subclass calls GDN's
``__init__`` and, for the ROCm builder, GDN's ``build()``).
"""

from __future__ import annotations

import ast
from pathlib import Path

GDN_FILE = "vllm/v1/attention/backends/gdn_attn.py"


def family_files() -> dict[str, list[str]]:
    """File (``vllm/...py``) -> the builder classes it defines, GDN's own file included, for the
    loaded release (imports vLLM)."""
    from gdn_review.harness.builders import family_modules
    from gdn_review.harness.environment import prepare_platform

    prepare_platform()
    files: dict[str, list[str]] = {}
    for cls, module in family_modules().items():
        files.setdefault(module.replace(".", "/") + ".py", []).append(cls)
    return {path: sorted(classes) for path, classes in sorted(files.items())}


def named_builders(record) -> set[str]:
    """The builder classes the record's cases name (GDN's own is named by none)."""
    return {case.builder for case in record.cases if getattr(case, "builder", None)}


def covers(record, target: str, files: dict[str, list[str]]) -> bool:
    """Whether the record's tests run ``target``'s code: GDN's file runs under every record;
    a subclass file under the records whose cases name one of its classes."""
    if target == GDN_FILE or record.target.file == target:
        return True
    return bool(named_builders(record) & set(files.get(target, ())))


def defined_classes(source: str) -> set[str]:
    """The classes a module's source defines at its top level (none where it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


def covered_files(record, patched: dict, read) -> list[tuple[str, str | None]]:
    """The files of a diff (``patched``: path -> new text or None) whose change may move the
    record's cases, each with the symbol its cases build through (None: the record's target
    symbol): its target file; a file defining a builder its cases name (``read``: the
    release's text of a file); GDN's file when its cases name a subclass."""
    found: list[tuple[str, str | None]] = []
    if record.target.file in patched:
        found.append((record.target.file, None))
    names = named_builders(record)
    for relative in sorted(patched) if names else []:
        if relative == record.target.file or not relative.endswith(".py"):
            continue
        defined = names & defined_classes(read(relative) or patched[relative] or "")
        if defined:
            found.append((relative, f"{sorted(defined)[0]}.build"))
        elif relative == GDN_FILE:
            found.append((relative, "GDNAttentionMetadataBuilder.build"))
    return found


def is_family_file(target: str) -> bool:
    return target != GDN_FILE


def notes_path(kb_dir: Path, target: str) -> Path:
    """``kb/guard/notes.yaml`` for GDN's file; ``kb/guard/<module>.yaml`` for another file of the
    family (``kb/guard/vllm.models.kimi_k3.amd.kda_metadata.yaml``)."""
    if target == GDN_FILE:
        return Path(kb_dir) / "guard" / "notes.yaml"
    return Path(kb_dir) / "guard" / (target.removesuffix(".py").replace("/", ".") + ".yaml")


def report_stem(target: str) -> str:
    """``guard`` for GDN's file, ``guard-kimi_k3.amd.kda_metadata`` for a subclass file."""
    if target == GDN_FILE:
        return "guard"
    parts = target.removesuffix(".py").split("/")
    return "guard-" + ".".join(parts[2:] if parts[:2] == ["vllm", "models"] else parts[1:])


def kernels(source: str) -> dict[str, tuple[int, int]]:
    """The device kernels a file defines (functions under a ``*.jit`` decorator: Triton's
    ``@triton.jit``): name -> (first, last) line of the function."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            "jit" in ast.unparse(decorator).split("(")[0] for decorator in node.decorator_list
        ):
            found[node.name] = (node.lineno, node.end_lineno)
    return found


def kernel_lines(source: str) -> dict[int, str]:
    """Line -> reason for every line of a kernel's body: device code, which CPU never runs."""
    marked = {}
    for name, (first, last) in kernels(source).items():
        for line in range(first, last + 1):
            marked[line] = f"the Triton kernel {name} itself (device code)"
    return marked


def reasons_without_kernel(source: str, reasons: list[tuple[str, str]]) -> list[str]:
    """The notes (``where``, ``reason``) of a family file whose reason names no kernel: a
    subclass file's unreachable code is a kernel or code that calls one, and says which."""
    names = set(kernels(source))
    problems = []
    for where, reason in reasons:
        if not any(name in reason for name in names) and "kernel" not in reason:
            problems.append(
                f"{where}: the reason names no kernel ({', '.join(sorted(names)) or 'none'} "
                f"in this file): {reason!r}"
            )
    return problems
