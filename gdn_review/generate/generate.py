"""Records -> pytest module source: render, parse, then write (or only compare).

Rendering is deterministic: the same records give byte-identical modules.
Record strings reach the module only through the ``py`` filter, which writes
Python literals; ids become names only after validation. Every module is
``ast.parse``d before it is written, writes go through a temp file and a
rename, and only files carrying the generator's banner are ever replaced or
removed.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path

import jinja2

from gdn_review.common.files import atomic_write
from gdn_review.generate.literals import GENERATED, LiteralError
from gdn_review.generate.model import module_model, module_name
from gdn_review.kb import Record, is_draft, load_kb
from gdn_review.kb.models import python_name
from gdn_review.kb.subjects import key_short

BANNER_MARK = "# gdn-review: generated module"
DEFAULT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
MODULE_TEMPLATE = "test_module.py.j2"
# Every check runs on each of these devices (gpu_sync on CUDA only); CUDA skips without a GPU.
DEVICES = ("cpu", "cuda")


class GenerateError(Exception):
    """The generator cannot produce a valid module (template or record problem)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What generation would do to the output folder."""

    write: dict[Path, str]  # path -> new content (only files that change)
    unchanged: list[Path]
    remove: list[Path]  # generated files of records that no longer exist
    foreign: list[Path]  # files in the way that lack our banner
    drafts: list[Path] = dataclasses.field(default_factory=list)  # records skipped: open TODOs

    @property
    def stale(self) -> list[Path]:
        return sorted(list(self.write) + self.remove)


def py_literal(value, indent: int = 0) -> str:
    """A Python literal for plain data in generated modules' style (``literals.GENERATED``):
    deterministic (sorted keys), one item a line when long.

    Strings are written by ``repr``, so record text can never become code.
    """
    try:
        text = GENERATED.literal(value, indent, indent)
    except LiteralError as error:
        raise GenerateError(str(error)) from None
    ast.literal_eval(text)  # refuses anything that is not a plain literal
    return text


def module_context(record: Record, source: str, snapshot_dir: str | None = None) -> dict:
    """The module template's context: the record's module model (model.py) as plain data.

    ``snapshot_dir``: where the record's stored snapshots are, relative to the module's
    folder (default: ``../kb/snapshots/N``, generated_tests/ beside kb/).
    """
    model = module_model(record)
    claims = [
        {
            "id": claim.id,
            "text": claim.text,
            "kind": claim.kind,
            "function": claim.function,
            "releases": claim.releases,
            "check": claim.check,
            # Markers list risks sorted, whatever their order in the record.
            "params": [{"id": test.id, "risks": sorted(test.risks)} for test in claim.tests],
            "risks": sorted(claim.risks),
            "deviations": claim.deviations,
            "example_cases": claim.example_cases,
            "seed": claim.seed,
            "configuration": claim.configuration,
            "builder": claim.builder,
        }
        for claim in model.claims
    ]
    return {
        # The banner names the record; keep it to path characters (it is a comment line).
        "source": re.sub(r"[^A-Za-z0-9_./-]", "_", source),
        "record": record,
        "number": model.key,
        "label": model.label,
        "title": model.title,
        "claims": claims,
        "cases": model.cases,
        "expectations": model.expectations,
        "kinds": sorted({claim.kind for claim in model.claims}),
        "devices": list(DEVICES),
        "snapshot_dir": snapshot_dir or f"../kb/snapshots/{record.key}",
        "pending": model.pending,
    }


def expected_tests(record: Record) -> dict[str, list[dict]]:
    """Per claim, the tests its generated module holds: label (case, pair or property),
    device, risks.

    The report compares evidence with this list, so a test that never ran (not
    collected, deselected, session stopped) cannot be mistaken for one that passed.
    """
    expected: dict[str, list[dict]] = {}
    for claim in module_model(record).claims:
        # gpu_sync: CUDA's count on CUDA, its CPU proxy (device-origin reads) on CPU.
        devices = ["cuda", "cpu"] if claim.kind == "gpu_sync" else list(DEVICES)
        # latency: measured by `gdn-review bench`; TODO: a draft's claim, no check yet.
        tests = [] if claim.kind in ("TODO", "latency") else claim.tests
        expected[claim.id] = [
            {"label": test.id, "device": device, "risks": sorted(test.risks)}
            for test in tests
            for device in devices
        ]
    return expected


def environment(templates: Path = DEFAULT_TEMPLATES, **filters) -> jinja2.Environment:
    """The Jinja environment of every template (modules and reports): strict, no autoescape."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["py"] = py_literal
    env.filters["ident"] = python_name
    env.filters["short"] = key_short  # a record's key as people read it: #52078, update_block_table
    env.filters.update(filters)
    return env


def render_module(
    record: Record,
    source: str,
    templates: Path = DEFAULT_TEMPLATES,
    snapshot_dir: str | None = None,
) -> str:
    """The module source for one record; parsed before it is returned."""
    try:
        text = (
            environment(templates)
            .get_template(MODULE_TEMPLATE)
            .render(**module_context(record, source, snapshot_dir))
        )
    except GenerateError as error:
        raise GenerateError(f"{source}: {error}") from None
    except jinja2.TemplateNotFound as error:
        raise GenerateError(f"template not found: {error.name} (in {templates})") from None
    except jinja2.TemplateError as error:
        raise GenerateError(f"template error rendering {source}: {error}") from None
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    try:
        ast.parse(text, filename=module_name(record))
    except SyntaxError as error:
        raise GenerateError(
            f"rendered module for {source} is not valid Python: line {error.lineno}: {error.msg}"
        ) from None
    if BANNER_MARK not in text.splitlines()[1]:
        raise GenerateError(f"template {MODULE_TEMPLATE} must put {BANNER_MARK!r} on line 2")
    return text


def has_banner(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8") as handle:
            head = [handle.readline() for _ in range(3)]
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() == BANNER_MARK for line in head)


def plan(kb_dir: Path, out_dir: Path, templates: Path = DEFAULT_TEMPLATES) -> Plan:
    """Compare what the records render to with what is in ``out_dir``."""
    records = load_kb(kb_dir)
    wanted: dict[Path, str] = {}
    drafts: list[Path] = []
    for path, record in records.items():
        if is_draft(record):
            drafts.append(path)  # half a module would be worse than none
            continue
        # Named relative to the kb folder's own name, so output never depends on where it lies.
        source = f"{Path(kb_dir).name}/{path.name}"
        # Stored snapshots (kb/snapshots/N), relative to the module's folder, '/'-separated.
        snapshot_dir = Path(
            os.path.relpath(Path(kb_dir) / "snapshots" / str(record.key), out_dir)
        ).as_posix()
        wanted[out_dir / module_name(record)] = render_module(
            record, source, templates, snapshot_dir
        )
    write, unchanged, foreign = {}, [], []
    for path, text in sorted(wanted.items()):
        if path.exists():
            if not has_banner(path):
                foreign.append(path)
                continue
            if path.read_text(encoding="utf-8") == text:
                unchanged.append(path)
                continue
        write[path] = text
    # A draft's old module (if any) stays until the draft is complete again.
    keep = set(wanted) | {out_dir / module_name(records[p]) for p in drafts}
    remove = (
        sorted(p for p in out_dir.glob("test_*.py") if p not in keep and has_banner(p))
        if out_dir.is_dir()
        else []
    )
    return Plan(write=write, unchanged=unchanged, remove=remove, foreign=foreign, drafts=drafts)


def apply(result: Plan) -> None:
    """Carry out a plan: write changed modules, remove modules of removed records."""
    if result.foreign:
        names = ", ".join(str(p) for p in result.foreign)
        raise GenerateError(f"refusing to overwrite files without the gdn-review banner: {names}")
    for path, text in result.write.items():
        atomic_write(path, text)
    for path in result.remove:
        path.unlink()
