"""Records -> pytest module source: render, parse, then write (or only compare).

Rendering is deterministic: the same records give byte-identical modules.
Record strings reach the module only through the ``py`` and ``assign`` filters,
which write Python literals (``literals.GENERATED``); ids become names only after
validation. Every module is ``ast.parse``d before it is written, writes go through
a temp file and a rename, and only files carrying the generator's banner are ever
replaced or removed. ``Rendering`` does this for the export's templates too.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from pathlib import Path

import jinja2

from gdn_review.common import snapshots
from gdn_review.common.files import atomic_write
from gdn_review.common.vocabulary import MutantStatus, Outcome, Verdict
from gdn_review.generate.literals import GENERATED, Call, Code, LiteralError, Style
from gdn_review.generate.model import ClaimModel, module_model, module_name
from gdn_review.kb import Record, is_draft, load_kb
from gdn_review.kb.models import python_name
from gdn_review.kb.subjects import key_short

BANNER_MARK = "# gdn-review: generated module"
DEFAULT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
MODULE_TEMPLATE = "test_module.py.j2"  # the module template of every tree
HEAD_CHARS = 20000  # characters of a module in which its mark is looked for
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


def _pytest_param(test_id: str, risks: list[str] | None = None) -> Call:
    """A test's ``pytest.param``: its id, its case marker and (``risks``: a check's test,
    a list of marks) the risks it addresses, sorted whatever their order in the record."""
    marks = case = Call("pytest.mark.case", (test_id,))
    if risks is not None:
        marks = [case] + ([Call("pytest.mark.risk", tuple(sorted(risks)))] if risks else [])
    return Call("pytest.param", (test_id,), {"id": test_id, "marks": marks})


def _batch_calls(claim: ClaimModel) -> dict[str, Call]:
    """An invariant's calls of the harness that make its batches: random ones (Hypothesis)
    and those at the edges of its parameters; {} for another kind."""
    if claim.kind != "invariant":
        return {}
    check = claim.check
    arguments = {"speculative_tokens": check["speculative_tokens"], "max_rows": check["max_rows"]}
    if claim.configuration:
        arguments["configuration"] = Code(f"CONFIGURATION_{claim.name}")
    if check.get("decodes_only"):
        arguments["decodes_only"] = True
    calls = ("random_batches", "boundary_batches")
    return {call: Call(f"harness.{call}", (), arguments) for call in calls}


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
            "params": [_pytest_param(test.id, test.risks) for test in claim.tests],
            "risk_mark": Call("pytest.mark.risk", tuple(sorted(claim.risks)))
            if claim.risks
            else None,
            "deviations": claim.deviations,
            "example_cases": claim.example_cases,
            "seed": claim.seed,
            "configuration": claim.configuration,
            "builder": claim.builder,
            **_batch_calls(claim),
        }
        for claim in model.claims
    ]
    return {
        # The banner names the record; keep it to path characters (it is a comment line).
        "source": re.sub(r"[^A-Za-z0-9_./-]", "_", source),
        "key": model.key,
        "label": model.label,
        "title": model.title,
        "record_format": model.record_format,
        "claims": claims,
        "cases": model.cases,
        "expectations": model.expectations,
        "kinds": sorted({claim.kind for claim in model.claims}),
        "devices": list(DEVICES),
        "snapshot_dir": snapshot_dir or snapshots.snapshot_dir("../kb", record.key).as_posix(),
        "snapshot_params": [_pytest_param(case_id) for case_id in model.cases],
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
    env.filters["ident"] = python_name
    env.filters["short"] = key_short  # a record's key as people read it: #52078, update_block_table
    env.filters.update(filters)
    # Templates compare against the vocabulary's words, never typed ones.
    env.globals.update(Verdict=Verdict, Outcome=Outcome, MutantStatus=MutantStatus)
    return env


@functools.cache
def _module_environment(templates: Path, style: Style) -> jinja2.Environment:
    """One environment per template tree and style: Jinja compiles a template once per environment
    (one per module compiled the tree again, 2.7 s of a run's 81 modules); its loader still reads
    a template edited since (auto_reload)."""
    return environment(
        templates,
        py=style.literal,
        assign=lambda value, target: style.assignment(target, value),
    )


@dataclasses.dataclass(frozen=True)
class Rendering:
    """The one renderer of generated and exported modules: a tree of module templates,
    the style of its literals, and the mark that makes a file its own.

    Why two trees (templates/, templates/export/): a generated module runs the harness
    under the gdn-review plugin (markers, fixtures, evidence) on any release; an exported
    one carries the harness's helpers, is resolved for one release and follows vLLM's
    conventions. A check kind's two templates share the model and this renderer; their
    lines differ nearly everywhere, so one tree would be two behind ``if``s.
    """

    templates: Path
    style: Style  # literals.GENERATED or literals.RUFF
    mark: str  # starts a line of every module it renders, near the top

    def render(self, context: dict, name: str, source: str) -> str:
        """The module ``name`` rendered from ``context`` (of record ``source``), parsed
        and carrying the mark. Record strings reach it only through the filters ``py``
        (a literal: ``value | py(first, indent, trail)``) and ``assign`` (``NAME = value``)."""
        env = _module_environment(self.templates, self.style)
        try:
            text = env.get_template(MODULE_TEMPLATE).render(**context)
        except LiteralError as error:
            raise GenerateError(f"{source}: {error}") from None
        except jinja2.TemplateNotFound as error:
            raise GenerateError(f"template not found: {error.name} (in {self.templates})") from None
        except jinja2.TemplateError as error:
            raise GenerateError(f"template error rendering {name} from {source}: {error}") from None
        text = re.sub(r"\n{4,}", "\n\n\n", text)
        try:
            ast.parse(text, filename=name)
        except SyntaxError as error:
            raise GenerateError(
                f"{name} rendered from {source} is not valid Python: "
                f"line {error.lineno}: {error.msg}"
            ) from None
        if not self.marked(text):
            raise GenerateError(f"{self.templates / MODULE_TEMPLATE} must write {self.mark!r}")
        return text

    def marked(self, text: str) -> bool:
        """Whether a line of ``text``'s head (its banner, its docstring) starts with the mark."""
        return any(line.lstrip().startswith(self.mark) for line in text[:HEAD_CHARS].splitlines())

    def owns(self, path: Path) -> bool:
        """Whether ``path`` is a module this rendering wrote (only those are replaced)."""
        try:
            with path.open(encoding="utf-8") as handle:
                return self.marked(handle.read(HEAD_CHARS))
        except (OSError, UnicodeDecodeError):
            return False

    def compare(self, wanted: dict[Path, str]) -> tuple[dict[Path, str], list[Path], list[Path]]:
        """(to write, unchanged, foreign): ``wanted``'s files that differ from the disk, those
        that do not, and those in the way that this rendering did not write."""
        on_disk = sorted(path for path in wanted if path.exists())
        foreign = [path for path in on_disk if not self.owns(path)]
        same = [p for p in on_disk if p not in foreign and p.read_text("utf-8") == wanted[p]]
        write = {p: text for p, text in sorted(wanted.items()) if p not in foreign + same}
        return write, same, foreign


# Generated modules (generated_tests/): the banner on line 2, the generator's style.
MODULES = Rendering(DEFAULT_TEMPLATES, GENERATED, BANNER_MARK)


def render_module(
    record: Record,
    source: str,
    templates: Path = DEFAULT_TEMPLATES,
    snapshot_dir: str | None = None,
) -> str:
    """The module source for one record; parsed before it is returned."""
    rendering = dataclasses.replace(MODULES, templates=Path(templates))
    return rendering.render(
        module_context(record, source, snapshot_dir), module_name(record), source
    )


def plan(
    kb_dir: Path, out_dir: Path, templates: Path = DEFAULT_TEMPLATES, records: dict | None = None
) -> Plan:
    """Compare what the records render to with what is in ``out_dir``. ``records``: every record
    of ``kb_dir`` where the caller has loaded them already (a load of the bundled KB is 1.4 s)."""
    records = load_kb(kb_dir) if records is None else records
    wanted: dict[Path, str] = {}
    drafts: list[Path] = []
    for path, record in records.items():
        if is_draft(record):
            drafts.append(path)  # half a module would be worse than none
            continue
        # Named relative to the kb folder's own name, so output never depends on where it lies.
        source = f"{Path(kb_dir).name}/{path.name}"
        # Stored snapshots (kb/snapshots/N), relative to the module's folder, '/'-separated.
        folder = snapshots.snapshot_dir(kb_dir, record.key)
        snapshot_dir = Path(os.path.relpath(folder, out_dir)).as_posix()
        wanted[out_dir / module_name(record)] = render_module(
            record, source, templates, snapshot_dir
        )
    write, unchanged, foreign = MODULES.compare(wanted)
    # A draft's old module (if any) stays until the draft is complete again.
    keep = set(wanted) | {out_dir / module_name(records[p]) for p in drafts}
    remove = (
        sorted(p for p in out_dir.glob("test_*.py") if p not in keep and MODULES.owns(p))
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
