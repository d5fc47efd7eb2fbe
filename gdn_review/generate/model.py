"""The module model: the tests one record's module holds, as plain data, for both renderings.

``module_model`` reads a record once; ``generate`` renders the model as a pytest module
over gdn_review.harness (generated_tests/), ``export`` as a standalone module for
vLLM's own tests, resolved for one release (the known deviations active there, the
claims and cases outside it left out). What a test is (its claim, its case or pair or
property, the risks it addresses, its deviations) is decided here, for both.
"""

from __future__ import annotations

import dataclasses
import hashlib

from gdn_review.common import record_format, snapshots
from gdn_review.kb import Record
from gdn_review.kb.models import python_name


@dataclasses.dataclass(frozen=True)
class ClaimTest:
    """One test of a claim: on a case, on a pair of cases (differential), or of a
    property (invariant, on every named case and random batches)."""

    id: str  # its pytest id: the case, the pair ("first-vs-second") or the property
    cases: list[str]  # the cases it builds: [case], [first, second]; none for a property
    risks: list[str]  # the risks it addresses, in the record's order


@dataclasses.dataclass(frozen=True)
class ClaimModel:
    """A claim as its module checks it."""

    id: str
    text: str
    kind: str  # the check kind
    name: str  # the id as a Python name (the loader keeps distinct ids distinct)
    function: str  # its test function in the generated module
    exported_function: str  # ...and in the exported module (lower case, as vLLM names tests)
    releases: str | None  # the range it speaks of (its own, within a contract's)
    check: dict  # the check's parameters without its kind; a differential's pairs also by id
    deviation_selector: str  # what its known deviations name: "cases" or "properties"
    tests: list[ClaimTest]  # latency: its cases, which the bench times; TODO: none yet
    risks: list[str]  # every risk that names the claim, in the record's order
    deviations: list[dict]  # its known deviations as plain data, in the record's order
    example_cases: list[str]  # an invariant's named cases (default: every case), sorted
    compared: dict[str, dict]  # an equivalence check's expected fields per case, keys sorted
    seed: int  # an invariant's random batches: drawn from this seed (claim_seed)
    configuration: dict  # an invariant's builder settings for its drawn batches (see below)
    builder: dict  # an invariant's builder class: what it adds to every batch (see below)


@dataclasses.dataclass(frozen=True)
class ModuleModel:
    """Everything one record's module holds; no rendering reads the record for its tests."""

    key: int | str  # the record's key: a PR's number or a contract's id
    label: str  # "PR #52078", "contract update_block_table"
    title: str
    record_format: int  # its schema_version: how its expects are read (common.record_format)
    generated_module: str  # file names: test_pr_N.py ...
    exported_module: str  # ... and test_gdn_pr_N.py
    claims: list[ClaimModel]
    cases: dict[str, dict]  # every case as build() inputs (Record.case_inputs), ids sorted
    expectations: dict[str, dict]  # expected build() fields of each case that has some
    pending: dict[str, str]  # claims of an open PR that fail until its change is in, and why
    risks: dict[str, str]  # every risk's text by id, in the record's order


def module_name(record: Record, exported: bool = False) -> str:
    """The record's module file: test_pr_N.py, test_contract_<id>.py (exported: test_gdn_...)."""
    subject = "pr" if record.pr is not None else "contract"
    return f"test_{'gdn_' if exported else ''}{subject}_{record.key}.py"


def pair_id(first: str, second: str) -> str:
    """The test id of a differential check's pair of cases."""
    return f"{first}-vs-{second}"


def claim_seed(key: int | str, claim_id: str) -> int:
    """The seed of a claim's random batches, from the record's key and the claim's id only.

    Why not Hypothesis's ``derandomize``: it seeds from the test function's source, so every
    edit of a template's text redrew every invariant's examples (a batch at the capture bound
    was lost that way). The generated suite (``@seed``) and the exported modules
    (``random.Random``) both take this one.
    """
    digest = hashlib.sha256(f"{key}/{claim_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


# What a case holds of its own batch; the rest of it is the builder's configuration.
BATCH_KEYS = {"id", "rows", "padded_rows", "drafts", "speculative_tokens", "max_num_seqs"}


def configuration_of(record: Record, claim) -> dict:
    """An invariant's ``configuration``: its named case's settings, without the case's own
    batch (rows, padding, speculation), keys sorted; {} when it names none."""
    case_id = getattr(claim.check, "configuration", None)
    if case_id is None:
        return {}
    inputs = record.case_inputs()[case_id]
    return {key: inputs[key] for key in sorted(inputs) if key not in BATCH_KEYS}


def builder_of(record: Record, claim) -> dict:
    """An invariant's ``builder`` part of every batch, named cases included: its builder
    class, the fields mirrors_gdn compares (``mirror_fields``) and its configuration (the
    two builders compare in one); {} when it names no builder."""
    name = getattr(claim.check, "builder", None)
    if name is None:
        return {}
    part = dict(configuration_of(record, claim), builder=name)
    if claim.check.fields is not None:
        part["mirror_fields"] = list(claim.check.fields)
    return dict(sorted(part.items()))


def _risks_of(record: Record, claim_id: str, cases: list[str]) -> list[str]:
    """Risks a test addresses: it checks one of the risk's claims, on one of its cases (a
    risk without cases: on any; a test of a property, on no one case: every risk)."""
    return [
        risk.id
        for risk in record.risks
        if claim_id in risk.claims and (not cases or not risk.cases or set(cases) & set(risk.cases))
    ]


def _check_data(claim) -> dict:
    check = claim.check.model_dump(mode="json")
    check.pop("kind")
    if claim.check.kind == "differential":
        check["pairs_by_id"] = {pair_id(*pair): list(pair) for pair in claim.check.pairs}
    return check


def _tests(record: Record, claim, check: dict) -> list[ClaimTest]:
    kind = claim.check.kind
    if kind == "invariant":
        risks = _risks_of(record, claim.id, [])
        return [ClaimTest(prop, [], risks) for prop in check["properties"]]
    if kind == "differential":
        named = [(pair_id(*pair), list(pair)) for pair in check["pairs"]]
    else:  # a test per case (a TODO check has no cases yet)
        named = [(case_id, [case_id]) for case_id in check.get("cases") or []]
    return [ClaimTest(test, cases, _risks_of(record, claim.id, cases)) for test, cases in named]


def _deviation(record: Record, deviation) -> dict:
    """A known deviation as plain data; its pinned ``expect`` with every dtype its record's
    format gives stated (``{dtype, values}``), as the harness compares it."""
    data = deviation.model_dump(mode="json", exclude_none=True)
    if data.get("expect"):
        usual = record_format.usual_dtypes(record.schema_version)
        data["expect"] = snapshots.explicit_form(data["expect"], None, usual)
    return data


def _claim_model(record: Record, claim) -> ClaimModel:
    kind = claim.check.kind
    name = python_name(claim.id)
    check = _check_data(claim)
    expected = {case.id: case.expect for case in record.cases}
    compared = {}
    if kind == "equivalence":
        compared = {
            case_id: dict(sorted(claim.check.compared(expected[case_id]).items()))
            for case_id in claim.check.cases
            if case_id in expected
        }
    examples = []
    if kind == "invariant":
        # An invariant runs on the cases it lists, else on every case of the record.
        examples = sorted(claim.check.cases or [case.id for case in record.cases])
    return ClaimModel(
        id=claim.id,
        text=claim.text,
        kind=kind,
        name=name,
        function=f"test_{name}_{kind}",
        exported_function=f"test_{name.lower()}_{kind}",
        releases=record.claim_releases(claim),
        check=check,
        deviation_selector="properties" if kind == "invariant" else "cases",
        tests=_tests(record, claim, check),
        risks=_risks_of(record, claim.id, []),
        deviations=[_deviation(record, d) for d in claim.known_deviations],
        example_cases=examples,
        compared=compared,
        seed=claim_seed(record.key, claim.id),
        configuration=configuration_of(record, claim) if kind == "invariant" else {},
        builder=builder_of(record, claim) if kind == "invariant" else {},
    )


def module_model(record: Record) -> ModuleModel:
    """The module model of ``record`` (complete or a draft: a draft's TODO claims have
    no tests)."""
    return ModuleModel(
        key=record.key,
        label=record.label,
        title=record.title,
        record_format=record.schema_version,
        generated_module=module_name(record),
        exported_module=module_name(record, exported=True),
        claims=[_claim_model(record, claim) for claim in record.claims],
        cases=dict(sorted(record.case_inputs().items())),
        expectations={
            case.id: dict(sorted(case.expect.items())) for case in record.cases if case.expect
        },
        pending=record.pending_claims(),
        risks={risk.id: risk.text for risk in record.risks},
    )
