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

The module is rendered from ``templates/export/``; record strings reach it only
as string literals or escaped docstring text. It is written as ``ruff format``
would write it at vLLM's settings (line length 88, double quotes, magic
trailing commas: RUFF in generate/literals.py), so the file passes ``ruff check`` and
``ruff format --check`` without running ruff here. Known deviations are
resolved for one target vLLM release (``--vllm-release``, default: the
installed one): those of that release become strict xfails, claims and cases
outside it are left out.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import sys
from pathlib import Path

import jinja2
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from gdn_review import generate
from gdn_review.common.files import atomic_write
from gdn_review.export.export_helpers import HARNESS, ExportError, harness_helpers, import_sections
from gdn_review.generate.literals import RUFF, Call, Code, LiteralError
from gdn_review.kb import Record, is_draft, load_kb
from gdn_review.kb.models import python_name
from gdn_review.kb.subjects import key_label
from gdn_review.run import snapshot as snapshots

TEMPLATES = generate.DEFAULT_TEMPLATES / "export"
MODULE_TEMPLATE = "test_module.py.j2"
EXPORT_MARK = "Exported by gdn-review from "
ALLOWED_IMPORTS = {"pytest", "torch", "vllm", "__future__"}
# Third-party modules the template itself imports at the top of the module.
TEMPLATE_IMPORTS = ("pytest", "torch")

# --- Record -> template context ------------------------------------------------


def module_name(record: Record) -> str:
    return f"test_gdn_pr_{record.number}.py" if record.pr is not None else f"test_gdn_contract_{record.number}.py"


def _in_range(releases: str | None, release: Version) -> bool:
    return not releases or SpecifierSet(releases).contains(release, prereleases=True)


# The clauses of a release range an exported module evaluates itself (no packaging there).
SIMPLE_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*\d+(\.\d+){0,2}\s*$")


def _module_releases(record: Record, claims: list[dict], cases: dict) -> dict[str, str]:
    """The ranges an exported module checks on whichever vLLM loads it: "claim C1" and
    "case X" -> the record's range, for each claim and case that has one."""
    ranges = {f"claim {c.id}": record.claim_releases(c) for c in record.claims if c.id in {x["id"] for x in claims}}
    ranges |= {f"case {case_id}": case.releases for case_id, case in cases.items()}
    ranges = {name: value for name, value in sorted(ranges.items()) if value}
    for name, value in ranges.items():
        if not all(SIMPLE_CLAUSE.match(clause) for clause in value.split(",")):
            raise ExportError(f"{name}: the range {value!r} uses more than >=, <=, >, <, == and != of plain releases, "
                              "which an exported module evaluates itself")
    return ranges


def _active_deviation(claim, selector: str, value: str, release: Version):
    """Index and deviation of ``claim`` that applies on ``release`` to ``value`` (or None).

    A differential check's value is a pair (``first-vs-second``): a deviation
    naming either of its cases applies to it.
    """
    pairs = _pairs(claim.check)
    names = set(pairs.get(value, ())) | {value}
    for index, deviation in enumerate(claim.known_deviations):
        if not _in_range(deviation.releases, release):
            continue
        chosen = getattr(deviation, selector)
        if not chosen or names & set(chosen):
            return index, deviation
    return None


def _pairs(check) -> dict[str, list[str]]:
    """A differential check's pairs by id (``first-vs-second``, as generated modules name them)."""
    if check.kind != "differential":
        return {}
    return {generate.pair_id(first, second): [first, second] for first, second in check.pairs}


def _risks(record: Record, claim_id: str) -> list:
    return [risk for risk in record.risks if claim_id in risk.claims]


KIND_TEXT = {
    "op_budget": (
        "Checked as an op budget: the aten ops build() executes on the case, counted "
        "with a TorchDispatchMode, stay within {budget}."
    ),
    "equivalence": "Checked as equivalence: build() returns the case's expected fields (EXPECTED).",
    "invariant": (
        "Checked as an invariant: the property holds on every named case and on "
        "{examples} random valid batches drawn from random.Random({seed})."
    ),
    "gpu_sync": (
        "Checked on CUDA: the case's builder call synchronises host and device at most "
        "{max_syncs} times (torch.cuda.set_sync_debug_mode). On any device, a CPU proxy "
        "counts the host reads of tensors that would live on the device "
        "(DeviceOriginReads): at most {max_syncs}; CUDA's count stays the authority."
    ),
    "differential": (
        "Checked as a differential: two scenarios of the same batch (pairs of cases in "
        "CASES) agree on {fields}{prefix}."
    ),
}
PROXY_TEXT = (
    "CPU proxy of the check above: host reads, while the case's builder call runs, of "
    "tensors that would live on the device (its device-side inputs, the builder's "
    "buffers and what is computed from them), counted by DeviceOriginReads. The CUDA "
    "count stays the authority; this one runs where CUDA is absent."
)


def _claim_context(record: Record, claim, release: Version, cases: dict) -> dict | None:
    check = claim.check
    kind = check.kind
    name = python_name(claim.id)
    constant = name.upper()
    deviations: dict[int, dict] = {}
    params = []
    pinned = {}
    selector = "properties" if kind == "invariant" else "cases"
    pairs = {pair: both for pair, both in _pairs(check).items() if all(c in cases for c in both)}
    if kind == "invariant":
        values = list(check.properties)
    elif kind == "differential":
        values = list(pairs)
    else:
        values = [c for c in check.cases if c in cases]
    for value in values:
        found = _active_deviation(claim, selector, value, release)
        if found is None:
            params.append(value)
            continue
        index, deviation = found
        mark = f"{constant}_KNOWN_DEVIATION" + (f"_{index + 1}" if len(claim.known_deviations) > 1 else "")
        reason = f"known deviation on vLLM {release}: {deviation.reason}"
        if deviation.measured:
            reason += f" (measured: {deviation.measured})"
        deviations[index] = {"name": mark, "reason": reason, "instead": deviation.instead, "releases": deviation.releases}
        params.append(Call("pytest.param", (value, Code(f"marks={mark}"))))
        if deviation.expect is not None:
            pinned[value] = dict(sorted(deviation.expect.items()))
    if not params:
        return None
    # A contract's id seeds by a stable number of its own (a PR record: its number).
    seed = record.number if isinstance(record.number, int) else int.from_bytes(record.number.encode()[:4].ljust(4, b"_"), "big")
    paragraphs = [f"Claim {claim.id} of {record.label}: {claim.text}"]
    data = check.model_dump(mode="json")
    how = KIND_TEXT[kind].format(
        budget=RUFF.flat(data.get("budget")),
        examples=data.get("examples"),
        seed=seed,
        max_syncs=data.get("max_syncs"),
        fields=", ".join(data.get("fields") or ()),
        prefix=" (the first case's lists a prefix of the second's)" if data.get("compare") == "prefix" else "",
    )
    risks = _risks(record, claim.id)
    addresses = " Risks it addresses: " + ", ".join(risk.id for risk in risks) + " (module docstring)." if risks else ""
    paragraphs.append(how + addresses)
    for deviation in deviations.values():
        paragraphs.append("Strict xfail, " + deviation["reason"])
    instead = {}
    for value in values:
        found = _active_deviation(claim, selector, value, release)
        if found is not None and found[1].instead:
            instead[value] = found[1].instead
    used = sorted({c for pair in pairs.values() for c in pair}) if kind == "differential" else (
        [] if kind == "invariant" else list(values)
    )
    return {
        "id": claim.id,
        "kind": kind,
        "constant": constant,
        "function": f"test_{name.lower()}_{kind}",
        "doc": RUFF.docstring(paragraphs, 4),
        "proxy_doc": RUFF.docstring([paragraphs[0], PROXY_TEXT + addresses, *paragraphs[2:]], 4)
        if kind == "gpu_sync" else None,
        "cases": used,
        "pairs": RUFF.assignment(f"{constant}_PAIRS", pairs) if kind == "differential" else None,
        "fields": RUFF.assignment(f"{constant}_FIELDS", list(data["fields"]))
        if kind == "differential" else None,
        "compare": data.get("compare"),
        "check": data,
        "params": RUFF.literal(params, 4, 4, 1),
        "deviations": [
            {
                "name": d["name"],
                "reason": RUFF.literal(d["reason"], len("    reason="), 4, 1),
                # Strict where the loaded vLLM is in the deviation's releases (all: no range).
                "releases": d["releases"],
            }
            for _, d in sorted(deviations.items())
        ],
        "pinned": RUFF.assignment(f"{constant}_PINNED", pinned) if pinned else None,
        # An open PR's improvement claim fails on a release without its change: a
        # non-strict xfail there, a plain pass in the PR's own CI (its change applied).
        "pending": RUFF.literal(
            f"pending: {record.pending_claims()[claim.id]}", len("    reason="), 4, 1
        )
        if claim.id in record.pending_claims() else None,
        # An equivalence claim that compares some fields only (fields / except): its own expectations.
        "compared": RUFF.assignment(
            f"{constant}_EXPECTED", {c: dict(sorted(check.compared(cases[c].expect).items())) for c in values}
        ) if kind == "equivalence" and (check.fields is not None or check.except_ is not None) else None,
        "budget": RUFF.assignment(f"{constant}_BUDGET", dict(data.get("budget") or {}))
        if kind == "op_budget" else None,
        "instead": RUFF.assignment(f"{constant}_INSTEAD", instead) if instead else None,
        "seed": seed,
        "examples": data.get("examples"),
        "speculative_tokens": RUFF.flat(data.get("speculative_tokens")),
        "max_rows": data.get("max_rows"),
        "max_syncs": data.get("max_syncs"),
    }


# What only the record reads: left out of the cases a module holds.
CASE_METADATA = frozenset({"id", "text", "expect", "releases", "allow_impossible"})


def _plain_case(data: dict) -> dict:
    data = {key: value for key, value in data.items() if key not in CASE_METADATA}
    data["rows"] = [dict(sorted(row.items())) for row in data["rows"]]
    if "after" in data:
        data["after"] = [_plain_case(earlier) for earlier in data["after"]]
    return dict(sorted(data.items()))


def case_inputs(record: Record) -> dict[str, dict]:
    """Every case of ``record`` as ``build()`` inputs, keys sorted: the generated
    module's CASES (``Record.case_inputs``, which resolves ``after`` into the
    earlier cases' data, one level deep) without what only the record reads."""
    return {case_id: _plain_case(data) for case_id, data in record.case_inputs().items()}


def _stored_snapshot(folder: Path | None, record: Record, release: Version) -> tuple[dict | None, str]:
    """(the stored full-metadata snapshot of ``release``, or None; why not)."""
    make = f"make one with `{snapshots.command_for(record.number, str(release))}`"
    path = Path(folder) / f"{release}.json" if folder is not None else None
    if path is None or not path.exists():
        return None, f"the full-metadata snapshot (no stored snapshot of vLLM {release}: {make})"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ExportError(f"{path}: not a stored snapshot ({error}): {make}") from None
    if stored.get("format") != snapshots.SNAPSHOT_FORMAT or not isinstance(stored.get("cases"), dict):
        raise ExportError(f"{path}: not a {snapshots.SNAPSHOT_FORMAT} file: {make}")
    return stored, ""


def module_context(
    record: Record, source: str, release: Version, harness: Path = HARNESS, snapshot_folder: Path | None = None
) -> dict:
    """The template's context. ``snapshot_folder``: where the record's stored snapshots
    are (kb/snapshots/N); the one of ``release`` is embedded (None: none is)."""
    if is_draft(record):
        raise ExportError(f"{source} is a draft (open TODOs): complete it first (gdn-review validate lists them)")
    cases = {case.id: case for case in record.cases if _in_range(case.releases, release)}
    claims, left_out = [], []
    for claim in record.claims:
        if claim.check.kind == "latency":  # an A/B between releases, not a test of one release
            left_out.append(f"{claim.id} (latency: gdn-review bench times it between releases)")
            continue
        releases = record.claim_releases(claim)
        context = _claim_context(record, claim, release, cases) if _in_range(releases, release) else None
        if context is None:
            why = f"covers vLLM {releases}" if not _in_range(releases, release) else "no case applies"
            left_out.append(f"{claim.id} ({why})")
        else:
            claims.append(context)
    if not claims:
        raise ExportError(f"{source}: no claim applies to vLLM {release}: {', '.join(left_out)}")
    for attribute in ("constant", "function"):
        names = [c[attribute] for c in claims]
        if len(set(names)) != len(names):
            raise ExportError(f"{source}: claim ids that differ only in case give the same {attribute} name")
    kinds = {c["kind"] for c in claims}
    stored, why = _stored_snapshot(snapshot_folder, record, release)
    snapshot_cases = []
    if stored is None:
        left_out.append(why)
    else:
        snapshot_cases = sorted(c for c in cases if c in stored["cases"])
        missing = sorted(c for c in cases if c not in stored["cases"])
        if missing:
            left_out.append(
                f"the snapshot of {', '.join(missing)} (the stored snapshot of vLLM {release} has no such case: "
                f"make one with `{snapshots.command_for(record.number, str(release))}`)"
            )
        if not snapshot_cases:
            stored = None
    needs = kinds | ({"snapshot"} if stored is not None else set())
    helpers, statements = harness_helpers(needs, harness)
    stdlib, third_party = import_sections(statements + [f"import {m}" for m in TEMPLATE_IMPORTS])
    inputs = case_inputs(record)
    used_cases = sorted(cases) if "invariant" in kinds else sorted(
        {c for claim in claims for c in claim["cases"]} | set(snapshot_cases)
    )
    expected = {
        case_id: dict(sorted(cases[case_id].expect.items()))
        for claim in claims
        if claim["kind"] == "equivalence"
        for case_id in claim["check"]["cases"]
        if case_id in cases
    }
    risks = [f"{risk.id}: {risk.text}" for risk in record.risks if any(c["id"] in risk.claims for c in claims)]
    if record.pr is not None:
        title = f"Tests of GDNAttentionMetadataBuilder.build() from the review of vLLM PR #{record.number}."
        paragraphs = [title, [record.title, f"https://github.com/{record.pr.repo}/pull/{record.number}"]]
    else:
        title = f"Tests of GDNAttentionMetadataBuilder from the contract record {record.number} (no PR carries it)."
        paragraphs = [title, [record.title, "Covers: " + (", ".join(record.contract.covers) or f"vLLM {record.contract.releases}")]]
    if record.summary:
        paragraphs.append(record.summary)
    paragraphs.append(
        "Every test builds vLLM's real GDNAttentionMetadataBuilder from a real VllmConfig "
        "(a tiny Qwen3-Next config written to a temporary folder: no weights, no network) "
        "and checks what build() returns or executes, on CPU and, where there is one, on "
        f"a CUDA device. Known deviations of vLLM {release} are strict xfails: the tests "
        "stay green, and fail when a deviation disappears or changes."
    )
    if risks:
        paragraphs.append(["Risks these tests address:", *risks])
    if left_out:
        paragraphs.append(f"Not exported for vLLM {release}: " + ", ".join(left_out) + ".")
    paragraphs.append(
        f"{EXPORT_MARK}{source} for vLLM {release}. Change the record and export again "
        f"rather than editing: gdn-review export --record {record.number}"
    )
    return {
        "doc": RUFF.docstring(paragraphs),
        "stdlib": stdlib,
        "third_party": third_party,
        "helpers": helpers,
        "cases": RUFF.assignment("CASES", {case_id: inputs[case_id] for case_id in used_cases}),
        "release": str(release),
        "releases": RUFF.assignment(
            "RELEASES", _module_releases(record, claims, {c: cases[c] for c in used_cases})
        ),
        "expected": RUFF.assignment("EXPECTED", dict(sorted(expected.items())))
        if expected else None,
        "claims": claims,
        "kinds": sorted(kinds),
        "needs_device": bool(kinds - {"gpu_sync"}) or stored is not None,
        "snapshot": None if stored is None else {
            "release": str(release),
            "made_by": snapshots.command_for(record.number, str(release)),
            "device": RUFF.assignment("SNAPSHOT_DEVICE", stored.get("device", "cpu")),
            "data": RUFF.assignment(
                "SNAPSHOT", RUFF.runs({c: stored["cases"][c] for c in snapshot_cases})
            ),
            "params": RUFF.literal(snapshot_cases, 4, 4, 1),
        },
    }


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
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return sorted(read - bound)


def _check_module(text: str, name: str) -> None:
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as error:
        raise ExportError(f"exported module {name} is not valid Python: line {error.lineno}: {error.msg}") from None
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
                raise ExportError(f"exported module {name} imports {module} (line {node.lineno}): only the standard library, pytest, torch and vllm are allowed")
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
    """The exported module for ``record`` and target vLLM ``release``; checked before it is returned.

    ``snapshot_folder``: the record's stored snapshots (``kb/snapshots/N``); the one
    of ``release`` goes into the module as data, with a test per case. Without one
    the module's docstring says that the snapshot is not exported.
    """
    try:
        release = Version(str(release))
    except InvalidVersion:
        raise ExportError(f"{release!r} is not a vLLM release (for example 0.33.0)") from None
    source = re.sub(r"[^A-Za-z0-9_./-]", "_", source)
    env = generate.environment(templates, lit=RUFF.literal, assign=RUFF.assignment)
    try:
        context = module_context(record, source, release, harness, snapshot_folder)
        text = env.get_template(MODULE_TEMPLATE).render(**context)
    except LiteralError as error:
        raise ExportError(f"{source}: {error}") from None
    except jinja2.TemplateNotFound as error:
        raise ExportError(f"template not found: {error.name} (in {templates})") from None
    except jinja2.TemplateError as error:
        raise ExportError(f"template error exporting {source}: {error}") from None
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    _check_module(text, module_name(record))
    return text


def find_record(kb_dir: Path, number: int) -> tuple[str, Record]:
    """The record of PR ``number`` in ``kb_dir`` and its source name (kb/N.yaml)."""
    for path, record in load_kb(kb_dir).items():
        if record.number == number:
            return f"{Path(kb_dir).name}/{path.name}", record
    raise ExportError(f"no record of {key_label(number)} in {kb_dir}")


def is_exported(path: Path) -> bool:
    try:
        head = path.read_text(encoding="utf-8")[:20000]
    except (OSError, UnicodeDecodeError):
        return False
    return EXPORT_MARK in head


def export(kb_dir: Path, number: int, out_dir: Path, release: str | None = None) -> Path:
    """Write ``out_dir/test_gdn_pr_N.py`` for the record of PR ``number``; return its path.

    ``release``: the vLLM release whose known deviations become strict xfails
    (default: the loaded vLLM). Only a file this command wrote may be replaced.
    """
    source, record = find_record(kb_dir, number)
    if release is None:
        from gdn_review.harness.environment import vllm_release

        release = str(vllm_release())
    text = render(record, source, release, snapshot_folder=snapshots.snapshot_dir(kb_dir, number))
    path = Path(out_dir) / module_name(record)
    if path.exists() and not is_exported(path):
        raise ExportError(f"refusing to overwrite {path}: it was not written by gdn-review export")
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        atomic_write(path, text)
    return path


def export_all(kb_dir: Path, out_dir: Path, release: str | None = None) -> list[tuple[Path, str | None]]:
    """``export --all``: one module per complete record (drafts are skipped and named); (path, why skipped)."""
    done: list[tuple[Path, str | None]] = []
    for path, record in sorted(load_kb(kb_dir).items(), key=lambda item: item[1].sort_key):
        if is_draft(record):
            done.append((path, "a draft (open TODOs)"))
            continue
        done.append((export(kb_dir, record.number, out_dir, release), None))
    return done
