"""A record -> one standalone pytest module for vLLM's own tests (``gdn-review export``).

The exported module imports only the standard library, pytest, torch and vLLM:
it runs wherever vLLM is installed, without gdn-review and without network.
Its helpers (a real builder from a real VllmConfig, a case -> ``build()``
inputs and scenarios, the snapshot of what ``build()`` returns, seeded random
batches, the invariant properties, the CPU proxy of host-device syncs) are not
written twice: they are the harness's own functions, read from
``gdn_review/harness/*.py`` and copied verbatim. Every check kind of the record
becomes tests (op_budget, equivalence, invariant, gpu_sync with its CPU proxy,
differential); the stored full-metadata snapshot of the target release
(``kb/snapshots/N/<release>.json``, ``gdn-review snapshot``) travels as data:
a literal in the module and a test per case that compares ``build()`` with it.

The module holds the tests of the record's module model (``generate.module_model``),
the same tests its generated module holds, rendered from ``templates/export/`` by the
generator's own renderer (``generate.Rendering``: render, parse, own the file);
record strings reach it only as string literals or escaped docstring text. It is
written as ``ruff format`` would write it at vLLM's settings (line length 88,
double quotes, magic trailing commas: ``RUFF`` in generate/literals.py), so the
file passes ``ruff check`` and ``ruff format --check`` without running ruff here.
Known deviations are resolved for one target vLLM release (``--vllm-release``,
default: the installed one; export_context.py): those of that release become
strict xfails, claims and cases outside it are left out.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import re
import sys
from pathlib import Path

from packaging.version import Version

from gdn_review import generate
from gdn_review.common import snapshots
from gdn_review.common.files import atomic_write
from gdn_review.common.release import Release, ReleaseError
from gdn_review.export.export_context import EXPORT_MARK, module_context
from gdn_review.export.export_helpers import HARNESS, ExportError
from gdn_review.generate.literals import RUFF, LiteralError
from gdn_review.kb import Record, is_draft, load_kb
from gdn_review.kb.subjects import key_label

TEMPLATES = generate.DEFAULT_TEMPLATES / "export"
# Exported modules: vLLM's ruff style; the mark starts a paragraph of the module docstring.
MODULES = generate.Rendering(TEMPLATES, RUFF, EXPORT_MARK)
ALLOWED_IMPORTS = {"pytest", "torch", "vllm", "__future__"}

# --- The rendered module ------------------------------------------------------


def module_name(record: Record) -> str:
    """The exported module's file name (test_gdn_pr_N.py, test_gdn_contract_<id>.py)."""
    return generate.module_name(record, exported=True)


def _undefined_names(tree: ast.Module) -> list[str]:
    """Names read somewhere but bound nowhere in the module (a rough check; ruff does the rest)."""
    bound = set(dir(builtins)) | {"__file__", "__name__"}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    read = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    return sorted(read - bound)


def _check_module(text: str, name: str) -> None:
    """What only an exported module must keep to: its imports, no name left undefined."""
    tree = ast.parse(text, filename=name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if top not in ALLOWED_IMPORTS and top not in sys.stdlib_module_names:
                raise ExportError(
                    f"exported module {name} imports {module} (line {node.lineno}): "
                    "only the standard library, pytest, torch and vllm are allowed"
                )
    undefined = _undefined_names(tree)
    if undefined:
        raise ExportError(f"exported module {name} uses undefined names: {', '.join(undefined)}")


def render(
    record: Record,
    source: str,
    release: str | Version,
    templates: Path = TEMPLATES,
    harness: Path = HARNESS,
    snapshot_folder: Path | None = None,
) -> str:
    """The exported module for ``record`` and target vLLM ``release``; checked before it is
    returned.

    ``snapshot_folder``: the record's stored snapshots (``kb/snapshots/N``); the one
    of ``release`` goes into the module as data, with a test per case. Without one
    the module's docstring says that the snapshot is not exported.
    """
    try:
        release = Release(release)
    except ReleaseError as error:
        raise ExportError(f"not a vLLM release: {error}") from None
    source = re.sub(r"[^A-Za-z0-9_./-]", "_", source)
    try:
        context = module_context(record, source, release, harness, snapshot_folder)
    except LiteralError as error:
        raise ExportError(f"{source}: {error}") from None
    rendering = dataclasses.replace(MODULES, templates=Path(templates))
    try:
        text = rendering.render(context, module_name(record), source)
    except generate.GenerateError as error:  # a template's error, said as the export's
        raise ExportError(str(error)) from None
    _check_module(text, module_name(record))
    return text


def find_record(kb_dir: Path, key: int | str) -> tuple[str, Record]:
    """The record ``key`` (a PR's number or a contract's id) in ``kb_dir`` and its source name
    (kb/N.yaml)."""
    for path, record in load_kb(kb_dir).items():
        if record.key == key:
            return f"{Path(kb_dir).name}/{path.name}", record
    raise ExportError(f"no record of {key_label(key)} in {kb_dir}")


def export(kb_dir: Path, key: int | str, out_dir: Path, release: str | None = None) -> Path:
    """Write ``out_dir/test_gdn_pr_N.py`` (a contract's: ``test_gdn_contract_<id>.py``) for record
    ``key``; return its path.

    ``release``: the vLLM release whose known deviations become strict xfails
    (default: the loaded vLLM). Only a file this command wrote may be replaced.
    """
    source, record = find_record(kb_dir, key)
    if release is None:
        from gdn_review.harness.environment import vllm_release

        release = str(vllm_release())
    text = render(record, source, release, snapshot_folder=snapshots.snapshot_dir(kb_dir, key))
    path = Path(out_dir) / module_name(record)
    write, _, foreign = MODULES.compare({path: text})
    if foreign:
        raise ExportError(f"refusing to overwrite {path}: it was not written by gdn-review export")
    for changed, new_text in write.items():
        atomic_write(changed, new_text)
    return path


def export_all(
    kb_dir: Path, out_dir: Path, release: str | None = None
) -> list[tuple[Path, str | None]]:
    """``export --all``: one module per complete record (drafts are skipped and named); (path, why
    skipped)."""
    done: list[tuple[Path, str | None]] = []
    for path, record in sorted(load_kb(kb_dir).items(), key=lambda item: item[1].sort_key):
        if is_draft(record):
            done.append((path, "a draft (open TODOs)"))
            continue
        done.append((export(kb_dir, record.key, out_dir, release), None))
    return done
