"""The module model resolved for one vLLM release: the context of ``templates/export/``.

``generate.module_model`` says what a record's module holds; the export adds what one
target release decides: the claims and cases it covers (the others are left out and
named in the module's docstring), the known deviations active there (strict xfails,
pinned to what they measure), the stored full-metadata snapshot of that release, and
the harness helpers the module's check kinds need. The context is plain data, laid out
by the templates' ``py`` and ``assign`` filters (``literals.RUFF``); record text reaches
the module only as those literals and as docstrings written here.
"""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

from gdn_review import generate
from gdn_review.common import record_format, release_range, snapshots
from gdn_review.export.export_helpers import HARNESS, ExportError, harness_helpers, import_sections
from gdn_review.generate.literals import RUFF, Call, Code
from gdn_review.generate.model import ClaimModel, ClaimTest, ModuleModel
from gdn_review.kb import Record, is_draft

EXPORT_MARK = "Exported by gdn-review from "
# Third-party modules the template itself imports at the top of the module.
TEMPLATE_IMPORTS = ("pytest", "torch")

# The clauses of a release range an exported module evaluates itself (no packaging there).
SIMPLE_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*\d+(\.\d+){0,2}\s*$")


def _module_releases(claims: list[ClaimModel], cases: dict[str, dict]) -> dict[str, str]:
    """The ranges an exported module checks on whichever vLLM loads it: "claim C1" and
    "case X" -> the record's range, for each exported claim and case that has one."""
    ranges = {f"claim {claim.id}": claim.releases for claim in claims}
    ranges |= {f"case {case_id}": case.get("releases") for case_id, case in cases.items()}
    ranges = {name: value for name, value in sorted(ranges.items()) if value}
    for name, value in ranges.items():
        if not all(SIMPLE_CLAUSE.match(clause) for clause in value.split(",")):
            raise ExportError(
                f"{name}: the range {value!r} uses more than >=, <=, >, <, == and != of plain "
                "releases, which an exported module evaluates itself"
            )
    return ranges


def _active_deviation(claim: ClaimModel, test: ClaimTest, release: Version):
    """Index and known deviation of ``claim`` that applies to ``test`` on ``release`` (or None).

    A deviation names cases or properties; one naming either case of a differential
    check's pair applies to the pair.
    """
    names = set(test.cases) | {test.id}
    for index, deviation in enumerate(claim.deviations):
        if not release_range.contains(deviation.get("releases"), release):
            continue
        chosen = deviation.get(claim.deviation_selector)
        if not chosen or names & set(chosen):
            return index, deviation
    return None


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


def _deviation_marks(claim: ClaimModel, tests: list[ClaimTest], release: Version):
    """Per test of ``claim`` on ``release``: its pytest parameter (a strict xfail's where a
    known deviation is active there); the active deviations by index (their mark's name,
    reason and releases); what each deviating test pins and what holds instead of it."""
    constant = claim.name.upper()
    params, deviations, pinned, instead = [], {}, {}, {}
    for test in tests:
        found = _active_deviation(claim, test, release)
        if found is None:
            params.append(test.id)
            continue
        index, deviation = found
        several = len(claim.deviations) > 1
        mark = f"{constant}_KNOWN_DEVIATION" + (f"_{index + 1}" if several else "")
        reason = f"known deviation on vLLM {release}: {deviation['reason']}"
        if deviation.get("measured"):
            reason += f" (measured: {deviation['measured']})"
        deviations[index] = {"name": mark, "reason": reason, "releases": deviation.get("releases")}
        params.append(Call("pytest.param", (test.id,), {"marks": Code(mark)}))
        if deviation.get("expect") is not None:
            pinned[test.id] = dict(sorted(deviation["expect"].items()))
        if deviation.get("instead"):
            instead[test.id] = deviation["instead"]
    return params, deviations, pinned, instead


def _claim_docs(model: ModuleModel, claim: ClaimModel, deviations: dict[int, dict]):
    """The docstrings of the claim's test function and (gpu_sync) of its CPU proxy's."""
    data = claim.check
    paragraphs = [f"Claim {claim.id} of {model.label}: {claim.text}"]
    how = KIND_TEXT[claim.kind].format(
        budget=RUFF.flat(data.get("budget")),
        examples=data.get("examples"),
        seed=claim.seed,
        max_syncs=data.get("max_syncs"),
        fields=", ".join(data.get("fields") or ()),
        prefix=" (the first case's lists a prefix of the second's)"
        if data.get("compare") == "prefix"
        else "",
    )
    addresses = ""
    if claim.risks:
        addresses = " Risks it addresses: " + ", ".join(claim.risks) + " (module docstring)."
    paragraphs.append(how + addresses)
    for deviation in deviations.values():
        paragraphs.append("Strict xfail, " + deviation["reason"])
    proxy = [paragraphs[0], PROXY_TEXT + addresses, *paragraphs[2:]]
    return RUFF.docstring(paragraphs, 4), (
        RUFF.docstring(proxy, 4) if claim.kind == "gpu_sync" else None
    )


def _claim_context(model: ModuleModel, claim: ClaimModel, release: Version, cases: set[str]):
    """The template's context of one claim on ``release`` (None: no test of it applies)."""
    data = claim.check
    # Its tests whose cases the release has (a property's: every one).
    tests = [test for test in claim.tests if all(case_id in cases for case_id in test.cases)]
    if claim.kind == "differential":
        tests = list({test.id: test for test in tests}.values())  # a pair is one key of PAIRS
    params, deviations, pinned, instead = _deviation_marks(claim, tests, release)
    if not params:
        return None
    doc, proxy_doc = _claim_docs(model, claim, deviations)
    # An equivalence claim that compares some fields only (fields / except): its own expects.
    compares_some = data.get("fields") is not None or data.get("except_") is not None
    return {
        "id": claim.id,
        "kind": claim.kind,
        "constant": claim.name.upper(),
        "function": claim.exported_function,
        "doc": doc,
        "proxy_doc": proxy_doc,
        "cases": sorted({case_id for test in tests for case_id in test.cases}),
        "compare": data.get("compare"),
        "check": data,
        "params": params,
        # Strict where the loaded vLLM is in a deviation's releases (all: no range).
        "deviations": [d for _, d in sorted(deviations.items())],
        "pinned": pinned,
        # An open PR's improvement claim fails on a release without its change: a
        # non-strict xfail there, a plain pass in the PR's own CI (its change applied).
        "pending": model.pending.get(claim.id),
        "instead": instead,
        "seed": claim.seed,
        "pairs": {test.id: test.cases for test in tests},
        "compared": {test.id: claim.compared[test.id] for test in tests}
        if claim.kind == "equivalence" and compares_some
        else None,
        "configuration": claim.configuration,
    }


CASE_METADATA = frozenset({"id", "text", "expect", "releases", "allow_impossible"})


def _plain_case(data: dict) -> dict:
    data = {key: value for key, value in data.items() if key not in CASE_METADATA}
    data["rows"] = [dict(sorted(row.items())) for row in data["rows"]]
    if "after" in data:
        data["after"] = [_plain_case(earlier) for earlier in data["after"]]
    return dict(sorted(data.items()))


def case_inputs(model: ModuleModel) -> dict[str, dict]:
    """Every case of the module model as ``build()`` inputs, keys sorted: the generated
    module's CASES (``Record.case_inputs``, which resolves ``after`` into the earlier
    cases' data, one level deep) without what only the record reads."""
    return {case_id: _plain_case(data) for case_id, data in model.cases.items()}


def _module_doc(record: Record, source: str, release: Version, risks: list, left_out: list):
    """The exported module's docstring: what it tests, from which record, for which release."""
    number = record.key
    if record.pr is not None:
        title = (
            f"Tests of GDNAttentionMetadataBuilder.build() from the review of vLLM PR #{number}."
        )
        link = f"https://github.com/{record.pr.repo}/pull/{number}"
    else:
        title = (
            f"Tests of GDNAttentionMetadataBuilder from the contract record {number} "
            "(no PR carries it)."
        )
        covers = ", ".join(record.contract.covers) or f"vLLM {record.contract.releases}"
        link = "Covers: " + covers
    paragraphs = [title, [record.title, link]]
    if record.summary:
        paragraphs.append(record.summary)
    paragraphs.append(
        "Every test builds vLLM's real GDNAttentionMetadataBuilder from a real VllmConfig "
        "(a tiny Qwen3-Next config written to a temporary folder: no weights, no network) "
        "and checks what build() returns or executes, on CPU and, where there is one, on "
        f"a CUDA device. Known deviations of vLLM {release} are strict xfails: the tests "
        "stay green, and fail when a deviation disappears or changes. A test that ends in "
        "CouldNotRun (could not run: ...) measured nothing: its set-up (the platform, "
        "VllmConfig, an import) raised before the builder ran; fix the environment."
    )
    if risks:
        paragraphs.append(["Risks these tests address:", *risks])
    if left_out:
        paragraphs.append(f"Not exported for vLLM {release}: " + ", ".join(left_out) + ".")
    paragraphs.append(
        f"{EXPORT_MARK}{source} for vLLM {release}. Change the record and export again "
        f"rather than editing: gdn-review export --record {number}"
    )
    return RUFF.docstring(paragraphs)


def _exported_claims(model: ModuleModel, source: str, release: Version, cases: set[str]):
    """(the contexts of the claims exported for ``release``, their models, what is left out
    and why); an error where none is or two would share a name."""
    claims, exported, left_out = [], [], []
    for claim in model.claims:
        if claim.kind == "latency":  # an A/B between releases, not a test of one release
            left_out.append(f"{claim.id} (latency: gdn-review bench times it between releases)")
            continue
        in_range = release_range.contains(claim.releases, release)
        context = _claim_context(model, claim, release, cases) if in_range else None
        if context is None:
            why = "no case applies" if in_range else f"covers vLLM {claim.releases}"
            left_out.append(f"{claim.id} ({why})")
        else:
            claims.append(context)
            exported.append(claim)
    if not claims:
        raise ExportError(f"{source}: no claim applies to vLLM {release}: {', '.join(left_out)}")
    for attribute in ("constant", "function"):
        names = [c[attribute] for c in claims]
        if len(set(names)) != len(names):
            raise ExportError(
                f"{source}: claim ids that differ only in case give the same {attribute} name"
            )
    return claims, exported, left_out


def _snapshot_context(
    folder: Path | None, key: int | str, release: Version, cases: set[str], left_out: list
) -> dict | None:
    """The stored snapshot of ``release`` as the template's context, for the cases it has;
    None where none is exported (why: added to ``left_out``, as a missing case is)."""
    make = snapshots.command_for(key, str(release))
    try:
        stored, why = snapshots.of_release(folder, key, str(release))
    except snapshots.SnapshotFileError as error:
        raise ExportError(f"{error}: make one with `{make}`") from None
    if stored is None:
        left_out.append(f"the full-metadata snapshot ({why})")
        return None
    snapshot_cases = sorted(c for c in cases if c in stored["cases"])
    missing = sorted(c for c in cases if c not in stored["cases"])
    if missing:
        left_out.append(
            f"the snapshot of {', '.join(missing)} (the stored snapshot of vLLM {release} "
            f"has no such case: make one with `{make}`)"
        )
    if not snapshot_cases:
        return None
    usual = stored.get("usual_dtypes", {})
    return {
        "release": str(release),
        "made_by": make,
        "cases": snapshot_cases,
        "device": stored.get("device", "cpu"),
        # Each tensor's dtype stated, as the table it was taken with gives it.
        "data": RUFF.runs(
            {c: snapshots.explicit_form(stored["cases"][c], None, usual) for c in snapshot_cases}
        ),
    }


def module_context(
    record: Record,
    source: str,
    release: Version,
    harness: Path = HARNESS,
    snapshot_folder: Path | None = None,
) -> dict:
    """The template's context: the record's module model (generate.module_model) resolved
    for ``release``. ``snapshot_folder``: where the record's stored snapshots are
    (kb/snapshots/N); the one of ``release`` is embedded (None: none is)."""
    if is_draft(record):
        raise ExportError(
            f"{source} is a draft (open TODOs): complete it first (gdn-review validate lists them)"
        )
    model = generate.module_model(record)
    cases = {
        c
        for c, data in model.cases.items()
        if release_range.contains(data.get("releases"), release)
    }
    claims, exported, left_out = _exported_claims(model, source, release, cases)
    kinds = {c["kind"] for c in claims}
    snapshot = _snapshot_context(snapshot_folder, model.key, release, cases, left_out)
    needs = kinds | ({"snapshot"} if snapshot else set())
    helpers, statements = harness_helpers(needs, harness)
    stdlib, third_party = import_sections(statements + [f"import {m}" for m in TEMPLATE_IMPORTS])
    inputs = case_inputs(model)
    # An invariant runs on every case of the release; other checks on the cases they name.
    used_cases = set(snapshot["cases"] if snapshot else [])
    used_cases |= cases if "invariant" in kinds else {c for claim in claims for c in claim["cases"]}
    used_cases = sorted(used_cases)
    # Each expected tensor with the dtype its record's format gives it stated: the module
    # compares what it holds, without the record's format.
    usual = record_format.usual_dtypes(model.record_format)
    expected = {
        case_id: snapshots.explicit_form(model.expectations.get(case_id, {}), None, usual)
        for claim in claims
        if claim["kind"] == "equivalence"
        for case_id in claim["check"]["cases"]
        if case_id in cases
    }
    risks = [
        f"{risk}: {text}"
        for risk, text in model.risks.items()
        if any(risk in claim.risks for claim in exported)
    ]
    releases = _module_releases(exported, {c: model.cases[c] for c in used_cases})
    return {
        "doc": _module_doc(record, source, release, risks, left_out),
        "stdlib": stdlib,
        "third_party": third_party,
        "helpers": helpers,
        "cases": {case_id: inputs[case_id] for case_id in used_cases},
        # Whether a case's expectations differ on CUDA (the equivalence checks then ask).
        "on_cuda": any("expect_on_cuda" in inputs[case_id] for case_id in used_cases),
        "release": str(release),
        "releases": releases,
        "expected": dict(sorted(expected.items())),
        "claims": claims,
        "kinds": sorted(kinds),
        "needs_device": bool(kinds - {"gpu_sync"}) or snapshot is not None,
        "snapshot": snapshot,
    }
