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


def module_name(record: Record) -> str:
    return f"test_pr_{record.number}.py" if record.pr is not None else f"test_contract_{record.number}.py"


def _check_data(claim) -> dict:
    check = claim.check.model_dump(mode="json")
    check.pop("kind")
    if claim.check.kind == "differential":
        check["pairs_by_id"] = {pair_id(first, second): [first, second] for first, second in claim.check.pairs}
    return check


def pair_id(first: str, second: str) -> str:
    """The test id of a differential check's pair of cases."""
    return f"{first}-vs-{second}"


def _risks_for(record: Record, claim_id: str, case_id: str | None) -> list[str]:
    """Risks a test addresses: it checks one of the risk's claims, on one of its cases."""
    found = []
    for risk in record.risks:
        if claim_id not in risk.claims:
            continue
        if case_id is None or not risk.cases or case_id in risk.cases:
            found.append(risk.id)
    return sorted(found)


def module_context(record: Record, source: str, snapshot_dir: str | None = None) -> dict:
    """Everything the module template needs, as plain data.

    ``snapshot_dir``: where the record's stored snapshots are, relative to the module's
    folder (default: ``../kb/snapshots/N``, generated_tests/ beside kb/).
    """
    claims = []
    for claim in record.claims:
        # The loader guarantees that distinct ids give distinct names.
        name = f"test_{python_name(claim.id)}_{claim.check.kind}"
        check = _check_data(claim)
        params = [
            {"id": case_id, "risks": _risks_for(record, claim.id, case_id)}
            # An invariant's tests are its properties (its cases are examples of each).
            for case_id in ([] if claim.check.kind == "invariant" else check.get("cases") or [])
        ]
        if claim.check.kind == "differential":
            params = [
                {
                    "id": pair_id(first, second),
                    "risks": sorted(set(_risks_for(record, claim.id, first)) | set(_risks_for(record, claim.id, second))),
                }
                for first, second in claim.check.pairs
            ]
        claims.append(
            {
                "id": claim.id,
                "text": claim.text,
                "kind": claim.check.kind,
                "function": name,
                "releases": record.claim_releases(claim),
                "check": check,
                "params": params,
                "risks": _risks_for(record, claim.id, None),
                "deviations": [d.model_dump(mode="json", exclude_none=True) for d in claim.known_deviations],
                # An invariant runs on the cases it lists, else on every case of the record.
                "example_cases": sorted(claim.check.cases or [c.id for c in record.cases])
                if claim.check.kind == "invariant" else [],
            }
        )
    cases = record.case_inputs()
    return {
        # The banner names the record; keep it to path characters (it is a comment line).
        "source": re.sub(r"[^A-Za-z0-9_./-]", "_", source),
        "record": record,
        "number": record.number,
        "label": record.label,
        "title": record.title,
        "claims": claims,
        "cases": dict(sorted(cases.items())),
        "expectations": {case.id: dict(sorted(case.expect.items())) for case in record.cases if case.expect},
        "kinds": sorted({c["kind"] for c in claims}),
        "devices": list(DEVICES),
        "snapshot_dir": snapshot_dir or f"../kb/snapshots/{record.number}",
        "pending": record.pending_claims(),
    }



def expected_tests(record: Record) -> dict[str, list[dict]]:
    """Per claim, the tests its generated module holds: label (case or property), device, risks.

    The report compares evidence with this list, so a test that never ran (not
    collected, deselected, session stopped) cannot be mistaken for one that passed.
    """
    expected: dict[str, list[dict]] = {}
    for claim in module_context(record, "expected")["claims"]:
        # gpu_sync: CUDA's count on CUDA, its CPU proxy (device-origin reads) on CPU.
        devices = ["cuda", "cpu"] if claim["kind"] == "gpu_sync" else list(DEVICES)
        if claim["kind"] == "invariant":
            labels = [(prop, claim["risks"]) for prop in claim["check"]["properties"]]
        elif claim["kind"] in ("TODO", "latency"):  # latency: measured by `gdn-review bench`
            labels = []
        else:
            labels = [(param["id"], param["risks"]) for param in claim["params"]]
        expected[claim["id"]] = [
            {"label": label, "device": device, "risks": risks} for label, risks in labels for device in devices
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


def render_module(record: Record, source: str, templates: Path = DEFAULT_TEMPLATES, snapshot_dir: str | None = None) -> str:
    """The module source for one record; parsed before it is returned."""
    try:
        text = environment(templates).get_template(MODULE_TEMPLATE).render(**module_context(record, source, snapshot_dir))
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
        raise GenerateError(f"rendered module for {source} is not valid Python: line {error.lineno}: {error.msg}") from None
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
        snapshot_dir = Path(os.path.relpath(Path(kb_dir) / "snapshots" / str(record.number), out_dir)).as_posix()
        wanted[out_dir / module_name(record)] = render_module(record, source, templates, snapshot_dir)
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
    remove = sorted(p for p in out_dir.glob("test_*.py") if p not in keep and has_banner(p)) if out_dir.is_dir() else []
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
