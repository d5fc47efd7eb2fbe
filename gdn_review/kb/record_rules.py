"""What types alone cannot say about a record: the rules it must keep once its models accept it.

Ids unique and references that resolve, a file named after its key, releases in
order, batches vLLM can produce (``kb.batch_rules``) in scenarios that can run
(after chains, a second builder, ``kb.server_config``, ``kb.step_config``),
deviations that fit their check, a check that reaches the target's entry point.
Each problem is a field's location and a message; ``kb.load`` turns the location
into ``file:line:col``.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from packaging.version import Version

from gdn_review.kb.batch_rules import case_problems
from gdn_review.kb.builder_family import GDN_BUILDER, known_builders
from gdn_review.kb.call_targets import declaration_problems
from gdn_review.kb.measured_rules import compared_problems, expect_problems, needs_problems
from gdn_review.kb.models import Record
from gdn_review.kb.server_config import server_problems
from gdn_review.kb.step_config import step_problems
from gdn_review.kb.types import ExpectField, python_name
from gdn_review.kb.yaml_source import Loc, Problems, field_path

# A case's settings that make its builder: cases built after one another (``after``) share one.
BUILDER_SETTINGS = (
    "speculative_tokens",
    "max_num_seqs",
    "cudagraph_mode",
    "mamba_cache_mode",
    "max_cudagraph_capture_size",
    "block_size",
    "prefill_backend",
    "resolved_prefill_backend",
    "prefix_caching",
    "max_model_len",
    "model_runner",
    "builder",
    "kda_prefill_backend",
    "use_kda_recoverssm",
    "adaptive_verification",
    "speculative_method",
)


def record_problems(
    record: Record, stem: str, expects_optional: bool = False, source: Path | None = None
) -> list[tuple[Loc, str]]:
    """What types alone cannot say: unique ids, references that resolve, batches vLLM can
    produce, expect keys the case measures, needs the releases define. ``source``: the record's
    file (an open PR's diff lies beside it)."""
    problems = _subject_problems(record, stem) + _id_problems(record)
    for c_index, case in enumerate(record.cases):
        problems += [
            (("cases", c_index) + loc, message)
            for loc, message in case_problems(case)
            + scenario_problems(record, case)
            + expect_problems(case)
            + needs_problems(record, case, source)
            + declaration_problems(case)
        ]
    for index, claim in enumerate(record.claims):
        problems += _claim_problems(record, index, claim, expects_optional)
    return problems + _reference_problems(record) + _target_reached(record)


def _no_such(kind: str, item: str, have: set[str]) -> str:
    return f"no {kind} with id {item!r} (known: {', '.join(sorted(have)) or 'none defined'})"


def _unknown(loc: Loc, kind: str, wanted: list[str], have: set[str]) -> Problems:
    """Each id of ``wanted`` (at ``loc`` and its index) that is not one of ``have``."""
    return Problems(
        (loc + (index,), _no_such(kind, item, have))
        for index, item in enumerate(wanted)
        if item not in have
    )


def _subject_problems(record: Record, stem: str) -> Problems:
    """The file is named after the record's key; its releases are in order, none for an open
    PR."""
    problems = Problems()
    target = record.target
    if stem != str(record.key):
        where = ("pr", "number") if record.pr is not None else ("contract", "id")
        problems.add(
            where,
            f"record file is named {stem!r} but {field_path(where)} is {record.key}; name "
            f"it {record.key}.yaml",
        )
    if (
        target.base_release
        and target.head_release
        and Version(target.base_release) >= Version(target.head_release)
    ):
        problems.add(
            ("target", "head_release"),
            f"head_release {target.head_release} must be later than "
            f"base_release {target.base_release}",
        )
    if record.is_open and target.head_release:
        problems.add(
            ("target", "head_release"),
            f"pr.state is {record.state}: the PR's change is in no release, so it has no "
            "head_release (leave it out; once the PR ships, set pr.state: merged and "
            "head_release together)",
        )
    return problems


def _id_problems(record: Record) -> Problems:
    """Ids of claims, cases and risks are unique; no two claim ids become one Python name."""
    problems = Problems()
    for kind in ("claims", "cases", "risks"):
        seen: set[str] = set()
        for index, item in enumerate(getattr(record, kind)):
            if item.id in seen:
                problems.add((kind, index, "id"), f"duplicate id {item.id!r}")
            seen.add(item.id)
    # Claim ids become Python names in generated modules: two ids must not become one.
    names: dict[str, str] = {}
    for index, claim in enumerate(record.claims):
        name = python_name(claim.id)
        if name in names and names[name] != claim.id:
            problems.add(
                ("claims", index, "id"),
                f"{claim.id!r} and {names[name]!r} both become the Python name "
                f"{name!r}; rename one",
            )
        names.setdefault(name, claim.id)
    return problems


def _claim_problems(record: Record, index: int, claim, expects_optional: bool) -> Problems:
    """A claim's check names cases of the record (an equivalence check's state fields it
    compares); its known deviations fit the check."""
    check = claim.check
    base: Loc = ("claims", index, "check")
    case_ids = {c.id for c in record.cases}
    problems = Problems()
    if check.kind != "differential":  # its cases come from its pairs, checked below
        cases = getattr(check, "cases", None) or []
        problems += _unknown(base + ("cases",), "case", cases, case_ids)
    if check.kind == "invariant" and check.configuration not in (None, *case_ids):
        problems.add(base + ("configuration",), _no_such("case", check.configuration, case_ids))
    if getattr(check, "builder", None) not in (None, GDN_BUILDER):
        family = known_builders()  # empty: no release at hand, validation cannot tell
        if family and check.builder not in family:
            problems.add(base + ("builder",), _no_builder(check.builder, family))
    if check.kind == "differential":
        problems += compared_problems(record, check, base)
        for p_index, pair in enumerate(check.pairs):
            problems += _unknown(base + ("pairs", p_index), "case", pair, case_ids)
            if pair[0] == pair[1]:
                problems.add(
                    base + ("pairs", p_index, 1),
                    "a differential check compares two different cases",
                )
    if check.kind == "equivalence" and not expects_optional:
        problems += _compared_problems(record, check, base)
    for d_index, deviation in enumerate(claim.known_deviations):
        d_loc: Loc = ("claims", index, "known_deviations", d_index)
        problems += _deviation_problems(deviation, check, d_loc)
    return problems


def _compared_problems(record: Record, check, base: Loc) -> Problems:
    """Each case an equivalence check names states expected fields, and some the check
    compares."""
    problems = Problems()
    case_ids = {c.id for c in record.cases}
    for c_index, case_id in enumerate(check.cases):
        if case_id in case_ids and not record.case(case_id).expect:
            problems.add(
                base + ("cases", c_index),
                f"case {case_id!r} states no expect: an equivalence check needs "
                f"expected fields; run gdn-review snapshot --record {record.key} "
                "--fill-expects",
            )
        elif case_id in case_ids and not check.compared(record.case(case_id).expect):
            problems.add(
                base + ("fields" if check.fields is not None else "except",),
                f"case {case_id!r} expects none of the fields this claim compares: "
                "name fields its expect states",
            )
    return problems


def _reference_problems(record: Record) -> Problems:
    """Risks, relations, the target's changes and upstream tests name the record's cases and
    claims; a risk's mutant ids are unique."""
    case_ids = {c.id for c in record.cases}
    claim_ids = {c.id for c in record.claims}
    problems = Problems()
    for kind in ("risks", "related", "upstream_tests"):
        for index, item in enumerate(getattr(record, kind)):
            problems += _unknown((kind, index, "cases"), "case", item.cases, case_ids)
            problems += _unknown((kind, index, "claims"), "claim", item.claims, claim_ids)
    for index, risk in enumerate(record.risks):
        mutant_ids = [m.id for m in risk.mutants]
        if len(set(mutant_ids)) != len(mutant_ids):
            problems.add(("risks", index, "mutants"), "mutant ids must be unique within a risk")
    for index, relation in enumerate(record.related):
        for c_index, change in enumerate(relation.changes):
            loc = ("related", index, "changes", c_index, "cases")
            problems += _unknown(loc, "case", change.cases, case_ids)
    for c_index, change in enumerate(record.target.changes):
        problems += _unknown(
            ("target", "changes", c_index, "cases"), "case", change.cases, case_ids
        )
    return problems


# Entry points other than build() a target symbol may name, and what reaches them:
# a case with that `entry`, or an invariant that calls it.
ENTRY_SYMBOLS = {
    "build_for_cudagraph_capture": ("capture", "capture_matches_build"),
    "update_block_table": ("update_block_table", "regather_matches_fresh_build"),
}


def _target_reached(record: Record) -> list[tuple[Loc, str]]:
    """A record whose target is an entry point other than build() needs a check that calls it.

    A draft (a check still of kind TODO) is exempt: its checks are not written yet.
    """
    method = record.target.symbol.rsplit(".", 1)[-1]
    if method not in ENTRY_SYMBOLS or any(claim.check.kind == "TODO" for claim in record.claims):
        return []
    entry, prop = ENTRY_SYMBOLS[method]
    case_ids = {c.id for c in record.cases}
    for claim in record.claims:
        check = claim.check
        if prop in getattr(check, "properties", []):
            return []
        if any(
            record.case(c).entry == entry
            for c in (getattr(check, "cases", None) or [])
            if c in case_ids
        ):
            return []
    return [
        (
            ("target", "symbol"),
            f"no check reaches {record.target.symbol}: check a case with `entry: {entry}` "
            f"(or the invariant {prop}); build() alone never calls it",
        )
    ]


def scenario_problems(record: Record, case) -> list[tuple[Loc, str]]:
    """Scenario combinations that can never run (a skip covers what is only absent here)."""
    problems = Problems()
    for index, row in enumerate(case.rows):
        if row.host_seq_len is not None and row.host_seq_len < row.seq_len:
            problems.add(
                ("rows", index, "host_seq_len"),
                f"host_seq_len {row.host_seq_len} < seq_len {row.seq_len}: the "
                "host's length is an upper bound",
            )
        if row.host_seq_len is not None and case.host_seq_len_offset is not None:
            problems.add(
                ("rows", index, "host_seq_len"),
                "give host_seq_len per row or host_seq_len_offset for the case, not both",
            )
    for field in case.expect_on_cuda:
        if field not in case.expect:
            problems.add(
                ("expect_on_cuda", field),
                f"{field!r} is not in expect: expect_on_cuda overrides a field expect states "
                "(give its value off CUDA in expect)",
            )
    return (
        problems
        + _capture_problems(case)
        + _after_problems(record, case)
        + _second_builder_problems(record, case)
        + server_problems(case)
        + step_problems(case)
        + builder_problems(case)
    )


def _capture_problems(case) -> Problems:
    """A capture case derives its drafts from the query lengths, and its batch fits the FULL-graph
    buffers."""
    problems = Problems()
    if case.entry != "capture":
        return problems
    for index, row in enumerate(case.rows):
        for name in ("drafted", "accepted"):
            if name in row.model_fields_set:
                problems.add(
                    ("rows", index, name),
                    f"a capture case derives {name} from the query lengths "
                    f"(build_for_cudagraph_capture); leave {name} out",
                )
    # build_for_cudagraph_capture asserts both fit the FULL-graph buffers.
    limit = case.max_num_seqs * ((case.speculative_tokens or 0) + 1)
    if case.max_cudagraph_capture_size is not None:
        limit = min(limit, case.max_cudagraph_capture_size)
    requests = len(case.rows) + case.padded_rows
    tokens = sum(row.query_len for row in case.rows) + (case.padded_tokens or 0)
    if requests > limit or tokens > limit:
        problems.add(
            ("rows",),
            f"capture asserts {requests} requests and {tokens} tokens <= "
            f"decode_cudagraph_max_bs {limit} (max_num_seqs * (k + 1), capped by "
            "max_cudagraph_capture_size)",
        )
    return problems


def _chain_problem(record: Record, case, earlier_id: str) -> str | None:
    """Why ``case`` cannot be built after ``earlier_id`` (an after chain): no such case, or a loop;
    None: it can."""
    case_ids = {c.id for c in record.cases}
    if earlier_id not in case_ids:
        return _no_such("case", earlier_id, case_ids)
    if earlier_id == case.id or case.id in _builds_before(record, earlier_id):
        return (
            f"case {earlier_id!r} is built before {case.id!r} and after it: "
            "after chains must not loop"
        )
    return None


def _after_problems(record: Record, case) -> Problems:
    """The cases built first on this case's builder: known, no loop, and of its builder
    settings."""
    problems = Problems()
    for index, earlier_id in enumerate(case.after or []):
        message = _chain_problem(record, case, earlier_id)
        if message is None:
            earlier = record.case(earlier_id)
            differ = [
                name for name in BUILDER_SETTINGS if getattr(earlier, name) != getattr(case, name)
            ]
            if differ:
                message = (
                    f"case {earlier_id!r} needs another builder ({', '.join(differ)} "
                    "differ): builds after one another share one builder"
                )
        if message is not None:
            problems.add(("after", index), message)
    return problems


def _second_builder_problems(record: Record, case) -> Problems:
    """A second builder re-gathers: only for entry update_block_table; its builds are known cases of
    its settings."""
    problems = Problems()
    if case.second_builder is None:
        return problems
    if case.entry != "update_block_table":
        problems.add(
            ("second_builder",),
            "a second builder is where update_block_table runs: give entry: update_block_table",
        )
    for index, earlier_id in enumerate(case.second_builder.after or []):
        message = _chain_problem(record, case, earlier_id)
        if message is not None:
            problems.add(("second_builder", "after", index), message)
    return problems


def builder_problems(case) -> list[tuple[Loc, str]]:
    """A case's builder class (``builder:``) and its own configuration: a class some release
    ships (kb.builder_family scans the release cache), Kimi-K3's fields only with a Kimi-K3
    builder, and no combination vLLM refuses (unless the case states the refusal: expect
    raised)."""
    kda = [
        name
        for name in ("kda_prefill_backend", "use_kda_recoverssm")
        if getattr(case, name) is not None
    ]
    if case.builder is None and not kda:
        return []
    problems = Problems()
    family = known_builders() if case.builder not in (None, GDN_BUILDER) else {}
    member = family.get(case.builder) if case.builder is not None else None
    if case.builder not in (None, GDN_BUILDER) and family and member is None:
        problems.add(("builder",), _no_builder(case.builder, family))
    kimi = member is not None and member.kimi_k3
    if kda and not kimi and (member is not None or case.builder in (None, GDN_BUILDER)):
        for name in kda:
            problems.add(
                (name,),
                f"{name} configures Kimi-K3's KDA builders: give builder: "
                "KimiK3KDAMetadataBuilder or KimiK3ROCmKDAMetadataBuilder",
            )
    return problems + _refused_by_vllm(case, member)


def _no_builder(name: str, family: dict) -> str:
    return (
        f"no release in the release cache ships a builder class {name!r} that subclasses "
        f"GDNAttentionMetadataBuilder (known: {', '.join(sorted(family))})"
    )


def _refused_by_vllm(case, member) -> Problems:
    """The builder configurations vLLM refuses (``member``: the case's builder class, None where
    the release cache does not tell)."""
    problems = Problems()
    if case.use_kda_recoverssm and not case.speculative_tokens:
        problems.add(
            ("use_kda_recoverssm",),
            "vLLM turns RecoverSSM on only with speculative decoding "
            "(use_kda_recoverssm = num_speculative_tokens > 0 and a KDA model): give "
            "speculative_tokens",
        )
    if case.adaptive_verification and not (
        case.speculative_tokens
        and case.model_runner == "v2"
        and case.cudagraph_mode is not None
        and "FULL" in case.cudagraph_mode
    ):
        problems.add(
            ("adaptive_verification",),
            "vLLM refuses adaptive verification without speculative decoding, off the V2 "
            "model runner ('Model Runner V1 does not support: adaptive draft verification') "
            "and without full CUDA graphs ('Adaptive verification requires full CUDA "
            "graphs'): give speculative_tokens, model_runner: v2 and a FULL cudagraph_mode",
        )
    rocm = member is not None and "_build_chunk_metadata" in member.methods
    if case.kda_prefill_backend == "flashkda" and (
        rocm or case.resolved_prefill_backend == "aiter_flydsl"
    ):
        problems.add(
            ("kda_prefill_backend",),
            "vLLM refuses flashkda off CUDA ('--kda-prefill-backend=flashkda is only "
            "available on CUDA.')",
        )
    if case.kda_prefill_backend == "fused" and member is not None and not rocm:
        problems.add(
            ("kda_prefill_backend",),
            "vLLM refuses fused off ROCm ('--kda-prefill-backend=fused is only available on "
            "ROCm.'): give builder: KimiK3ROCmKDAMetadataBuilder",
        )
    if rocm and case.resolved_prefill_backend == "aiter_flydsl" and "raised" not in case.expect:
        problems.add(
            ("resolved_prefill_backend",),
            f"{case.builder} builds its own FLA chunk metadata, so its constructor refuses "
            "the aiter_flydsl GDN prefill backend (_check_chunk_metadata_override, 0.32.0 "
            "on): state the refusal (expect: raised) or choose another backend",
        )
    return problems


def _builds_before(record: Record, case_id: str, seen: frozenset = frozenset()) -> set[str]:
    """Every case built before ``case_id`` on its builders, through after chains (stops at a
    loop)."""
    found: set[str] = set()
    try:
        case = record.case(case_id)
    except StopIteration:
        return found
    names = list(case.after or []) + list(
        (case.second_builder.after or []) if case.second_builder else []
    )
    for name in names:
        found.add(name)
        if name not in seen and name != case_id:
            found |= _builds_before(record, name, seen | {case_id})
    return found


def _deviation_problems(deviation, check, loc: Loc) -> Problems:
    """A deviation names cases and properties of its claim's check; its expect / instead fit the
    check's kind."""
    cases = set(getattr(check, "cases", None) or [])
    problems = _unknown(loc + ("cases",), "case of this claim's check", deviation.cases, cases)
    if deviation.properties:
        have = set(getattr(check, "properties", []))
        problems += _unknown(
            loc + ("properties",), "property of this claim's check", deviation.properties, have
        )
    if deviation.expect is not None and check.kind not in ("op_budget", "equivalence"):
        problems.add(
            loc + ("expect",), f"expect is for op_budget and equivalence checks, not {check.kind}"
        )
        return problems  # a deviation of the wrong kind: this one message says so
    if deviation.expect is not None:
        budget = check.kind == "op_budget"
        allowed = set(check.budget) if budget else set(get_args(ExpectField))
        for key in deviation.expect:
            if key not in allowed:
                problems.add(
                    loc + ("expect", key),
                    f"{key!r} is not {'in the budget' if budget else 'an expect field'} "
                    f"(choose from {', '.join(sorted(allowed))})",
                )
    if deviation.instead is not None and check.kind != "invariant":
        problems.add(loc + ("instead",), f"instead is for invariant checks, not {check.kind}")
    return problems
