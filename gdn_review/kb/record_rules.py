"""What types alone cannot say about a record: the rules it must keep once its models accept it.

Ids unique and references that resolve, a file named after its key, releases in
order, batches vLLM can produce (``kb.batch_rules``) in scenarios that can run
(after chains, a second builder, ``kb.server_config``, ``kb.step_config``),
deviations that fit their check, a check that reaches the target's entry point.
Each problem is a field's location and a message; ``kb.load`` turns the location
into ``file:line:col``.
"""

from __future__ import annotations

from typing import get_args

from packaging.version import Version

from gdn_review.kb.batch_rules import case_problems
from gdn_review.kb.models import Record
from gdn_review.kb.server_config import server_problems
from gdn_review.kb.step_config import step_problems
from gdn_review.kb.types import ExpectField, python_name
from gdn_review.kb.yaml_source import Loc


def record_problems(
    record: Record, stem: str, expects_optional: bool = False
) -> list[tuple[Loc, str]]:
    """What types alone cannot say: unique ids, references that resolve, batches vLLM can
    produce."""
    problems: list[tuple[Loc, str]] = []
    if stem != str(record.key):
        where = ("pr", "number") if record.pr is not None else ("contract", "id")
        what = "pr.number" if record.pr is not None else "contract.id"
        problems.append(
            (
                where,
                f"record file is named {stem!r} but {what} is {record.key}; name "
                f"it {record.key}.yaml",
            )
        )
    if (
        record.target.base_release
        and record.target.head_release
        and Version(record.target.base_release) >= Version(record.target.head_release)
    ):
        problems.append(
            (
                ("target", "head_release"),
                f"head_release {record.target.head_release} must be later than "
                f"base_release {record.target.base_release}",
            )
        )
    if record.is_open and record.target.head_release:
        problems.append(
            (
                ("target", "head_release"),
                f"pr.state is {record.state}: the PR's change is in no release, so it has no "
                "head_release (leave it out; once the PR ships, set pr.state: merged and "
                "head_release together)",
            )
        )

    def unique(kind: str, ids: list[str]) -> None:
        seen: set[str] = set()
        for index, item in enumerate(ids):
            if item in seen:
                problems.append(((kind, index, "id"), f"duplicate id {item!r}"))
            seen.add(item)

    unique("claims", [c.id for c in record.claims])
    # Claim ids become Python names in generated modules: two ids must not become one.
    names: dict[str, str] = {}
    for index, claim in enumerate(record.claims):
        name = python_name(claim.id)
        if name in names and names[name] != claim.id:
            problems.append(
                (
                    ("claims", index, "id"),
                    f"{claim.id!r} and {names[name]!r} both become the Python name "
                    f"{name!r}; rename one",
                )
            )
        names.setdefault(name, claim.id)
    unique("cases", [c.id for c in record.cases])
    unique("risks", [r.id for r in record.risks])
    case_ids = {c.id for c in record.cases}
    claim_ids = {c.id for c in record.claims}

    def known(loc: Loc, kind: str, wanted: list[str], have: set[str]) -> None:
        for index, item in enumerate(wanted):
            if item not in have:
                options = ", ".join(sorted(have)) or "none defined"
                problems.append((loc + (index,), f"no {kind} with id {item!r} (known: {options})"))

    for c_index, case in enumerate(record.cases):
        problems.extend((("cases", c_index) + loc, message) for loc, message in case_problems(case))
        problems.extend(
            (("cases", c_index) + loc, message) for loc, message in scenario_problems(record, case)
        )

    for index, claim in enumerate(record.claims):
        check = claim.check
        base: Loc = ("claims", index, "check")
        check_cases = getattr(check, "cases", None) or []
        if check.kind != "differential":  # its cases come from its pairs, checked below
            known(base + ("cases",), "case", check_cases, case_ids)
        if check.kind == "invariant" and check.configuration not in (None, *case_ids):
            options = ", ".join(sorted(case_ids)) or "none defined"
            problems.append(
                (
                    base + ("configuration",),
                    f"no case with id {check.configuration!r} (known: {options})",
                )
            )
        if check.kind == "differential":
            for p_index, pair in enumerate(check.pairs):
                known(base + ("pairs", p_index), "case", pair, case_ids)
                if pair[0] == pair[1]:
                    problems.append(
                        (
                            base + ("pairs", p_index, 1),
                            "a differential check compares two different cases",
                        )
                    )
        if check.kind == "equivalence" and not expects_optional:
            for c_index, case_id in enumerate(check_cases):
                if case_id in case_ids and not record.case(case_id).expect:
                    problems.append(
                        (
                            base + ("cases", c_index),
                            f"case {case_id!r} states no expect: an equivalence check needs "
                            f"expected fields; run gdn-review snapshot --record {record.key} "
                            "--fill-expects",
                        )
                    )
                elif case_id in case_ids and not check.compared(record.case(case_id).expect):
                    which = "fields" if check.fields is not None else "except"
                    problems.append(
                        (
                            base + (which,),
                            f"case {case_id!r} expects none of the fields this claim compares: "
                            "name fields its expect states",
                        )
                    )
        for d_index, deviation in enumerate(claim.known_deviations):
            d_loc: Loc = ("claims", index, "known_deviations", d_index)
            known(
                d_loc + ("cases",), "case of this claim's check", deviation.cases, set(check_cases)
            )
            if deviation.properties:
                have = set(getattr(check, "properties", []))
                known(
                    d_loc + ("properties",),
                    "property of this claim's check",
                    deviation.properties,
                    have,
                )
            problems.extend(_deviation_problems(deviation, check, d_loc))
    for index, risk in enumerate(record.risks):
        known(("risks", index, "cases"), "case", risk.cases, case_ids)
        known(("risks", index, "claims"), "claim", risk.claims, claim_ids)
        unique_mutants = [m.id for m in risk.mutants]
        if len(set(unique_mutants)) != len(unique_mutants):
            problems.append(
                (("risks", index, "mutants"), "mutant ids must be unique within a risk")
            )
    for index, relation in enumerate(record.related):
        known(("related", index, "claims"), "claim", relation.claims, claim_ids)
        known(("related", index, "cases"), "case", relation.cases, case_ids)
        for c_index, change in enumerate(relation.changes):
            known(("related", index, "changes", c_index, "cases"), "case", change.cases, case_ids)
    for c_index, change in enumerate(record.target.changes):
        known(("target", "changes", c_index, "cases"), "case", change.cases, case_ids)
    for u_index, upstream in enumerate(record.upstream_tests):
        known(("upstream_tests", u_index, "cases"), "case", upstream.cases, case_ids)
        known(("upstream_tests", u_index, "claims"), "claim", upstream.claims, claim_ids)
    problems.extend(_target_reached(record))
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
    problems: list[tuple[Loc, str]] = []
    case_ids = {c.id for c in record.cases}
    if case.entry == "capture":
        for index, row in enumerate(case.rows):
            for name in ("drafted", "accepted"):
                if name in row.model_fields_set:
                    problems.append(
                        (
                            ("rows", index, name),
                            f"a capture case derives {name} from the query lengths "
                            f"(build_for_cudagraph_capture); leave {name} out",
                        )
                    )
        # build_for_cudagraph_capture asserts both fit the FULL-graph buffers.
        limit = case.max_num_seqs * ((case.speculative_tokens or 0) + 1)
        if case.max_cudagraph_capture_size is not None:
            limit = min(limit, case.max_cudagraph_capture_size)
        requests = len(case.rows) + case.padded_rows
        tokens = sum(row.query_len for row in case.rows) + (case.padded_tokens or 0)
        if requests > limit or tokens > limit:
            problems.append(
                (
                    ("rows",),
                    f"capture asserts {requests} requests and {tokens} tokens <= "
                    f"decode_cudagraph_max_bs {limit} (max_num_seqs * (k + 1), capped by "
                    "max_cudagraph_capture_size)",
                )
            )
    for index, row in enumerate(case.rows):
        if row.host_seq_len is not None and row.host_seq_len < row.seq_len:
            problems.append(
                (
                    ("rows", index, "host_seq_len"),
                    f"host_seq_len {row.host_seq_len} < seq_len {row.seq_len}: the "
                    "host's length is an upper bound",
                )
            )
        if row.host_seq_len is not None and case.host_seq_len_offset is not None:
            problems.append(
                (
                    ("rows", index, "host_seq_len"),
                    "give host_seq_len per row or host_seq_len_offset for the case, not both",
                )
            )
    for index, earlier_id in enumerate(case.after or []):
        loc: Loc = ("after", index)
        if earlier_id not in case_ids:
            problems.append(
                (loc, f"no case with id {earlier_id!r} (known: {', '.join(sorted(case_ids))})")
            )
            continue
        earlier = record.case(earlier_id)
        if earlier_id == case.id or case.id in _builds_before(record, earlier_id):
            problems.append(
                (
                    loc,
                    f"case {earlier_id!r} is built before {case.id!r} and after it: "
                    "after chains must not loop",
                )
            )
        else:
            settings = (
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
            )
            differ = [name for name in settings if getattr(earlier, name) != getattr(case, name)]
            if differ:
                problems.append(
                    (
                        loc,
                        f"case {earlier_id!r} needs another builder ({', '.join(differ)} "
                        "differ): builds after one another share one builder",
                    )
                )
    return (
        problems
        + _second_builder_problems(record, case, case_ids)
        + server_problems(case)
        + step_problems(case)
        + builder_problems(case)
        + _expect_on_cuda_problems(case)
    )


def builder_problems(case) -> list[tuple[Loc, str]]:
    """A case's builder class (``builder:``) and its own configuration: a class some release
    ships (kb.builder_family scans the release cache), Kimi-K3's fields only with a Kimi-K3
    builder, and no combination vLLM refuses (unless the case states the refusal: expect
    raised)."""
    from gdn_review.kb.builder_family import GDN_BUILDER, known_builders

    problems: list[tuple[Loc, str]] = []
    kda = [
        name
        for name in ("kda_prefill_backend", "use_kda_recoverssm")
        if getattr(case, name) is not None
    ]
    if case.builder is None and not kda:
        return problems
    family = known_builders() if case.builder not in (None, GDN_BUILDER) else {}
    member = family.get(case.builder) if case.builder is not None else None
    if case.builder not in (None, GDN_BUILDER) and family and member is None:
        problems.append(
            (
                ("builder",),
                f"no release in the release cache ships a builder class {case.builder!r} that "
                "subclasses GDNAttentionMetadataBuilder (known: "
                f"{', '.join(sorted(family))})",
            )
        )
    kimi = member is not None and member.kimi_k3
    if kda and not kimi and (member is not None or case.builder in (None, GDN_BUILDER)):
        for name in kda:
            problems.append(
                (
                    (name,),
                    f"{name} configures Kimi-K3's KDA builders: give builder: "
                    "KimiK3KDAMetadataBuilder or KimiK3ROCmKDAMetadataBuilder",
                )
            )
    if case.use_kda_recoverssm and not case.speculative_tokens:
        problems.append(
            (
                ("use_kda_recoverssm",),
                "vLLM turns RecoverSSM on only with speculative decoding "
                "(use_kda_recoverssm = num_speculative_tokens > 0 and a KDA model): give "
                "speculative_tokens",
            )
        )
    if case.adaptive_verification and not (
        case.speculative_tokens
        and case.model_runner == "v2"
        and case.cudagraph_mode is not None
        and "FULL" in case.cudagraph_mode
    ):
        problems.append(
            (
                ("adaptive_verification",),
                "vLLM refuses adaptive verification without speculative decoding, off the V2 "
                "model runner ('Model Runner V1 does not support: adaptive draft verification') "
                "and without full CUDA graphs ('Adaptive verification requires full CUDA "
                "graphs'): give speculative_tokens, model_runner: v2 and a FULL cudagraph_mode",
            )
        )
    rocm = member is not None and "_build_chunk_metadata" in member.methods
    if case.kda_prefill_backend == "flashkda" and (
        rocm or case.resolved_prefill_backend == "aiter_flydsl"
    ):
        problems.append(
            (
                ("kda_prefill_backend",),
                "vLLM refuses flashkda off CUDA ('--kda-prefill-backend=flashkda is only "
                "available on CUDA.')",
            )
        )
    if case.kda_prefill_backend == "fused" and member is not None and not rocm:
        problems.append(
            (
                ("kda_prefill_backend",),
                "vLLM refuses fused off ROCm ('--kda-prefill-backend=fused is only available on "
                "ROCm.'): give builder: KimiK3ROCmKDAMetadataBuilder",
            )
        )
    if rocm and case.resolved_prefill_backend == "aiter_flydsl" and "raised" not in case.expect:
        problems.append(
            (
                ("resolved_prefill_backend",),
                f"{case.builder} builds its own FLA chunk metadata, so its constructor refuses "
                "the aiter_flydsl GDN prefill backend (_check_chunk_metadata_override, 0.32.0 "
                "on): state the refusal (expect: raised) or choose another backend",
            )
        )
    return problems


def _expect_on_cuda_problems(case) -> list[tuple[Loc, str]]:
    """``expect_on_cuda`` overrides fields the case's ``expect`` states."""
    return [
        (
            ("expect_on_cuda", field),
            f"{field!r} is not in expect: expect_on_cuda overrides a field expect states "
            "(give its value off CUDA in expect)",
        )
        for field in case.expect_on_cuda
        if field not in case.expect
    ]


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
        if name in seen or name == case_id:
            found.add(name)
            continue
        found.add(name)
        found |= _builds_before(record, name, seen | {case_id})
    return found


def _second_builder_problems(record: Record, case, case_ids: set[str]) -> list[tuple[Loc, str]]:
    """A second builder re-gathers: only for entry update_block_table; its builds are known cases of
    its settings."""
    problems: list[tuple[Loc, str]] = []
    if case.second_builder is None:
        return problems
    if case.entry != "update_block_table":
        problems.append(
            (
                ("second_builder",),
                "a second builder is where update_block_table runs: give entry: update_block_table",
            )
        )
    for index, earlier_id in enumerate(case.second_builder.after or []):
        loc: Loc = ("second_builder", "after", index)
        if earlier_id not in case_ids:
            problems.append(
                (loc, f"no case with id {earlier_id!r} (known: {', '.join(sorted(case_ids))})")
            )
        elif earlier_id == case.id or case.id in _builds_before(record, earlier_id):
            problems.append(
                (
                    loc,
                    f"case {earlier_id!r} is built before {case.id!r} and after it: "
                    "after chains must not loop",
                )
            )
    return problems


def _deviation_problems(deviation, check, loc: Loc) -> list[tuple[Loc, str]]:
    """A deviation's expect / instead must fit its claim's check kind."""
    problems: list[tuple[Loc, str]] = []
    if deviation.expect is not None:
        if check.kind == "op_budget":
            allowed = set(check.budget)
        elif check.kind == "equivalence":
            allowed = set(get_args(ExpectField))
        else:
            return [
                (
                    loc + ("expect",),
                    f"expect is for op_budget and equivalence checks, not {check.kind}",
                )
            ]
        for key in deviation.expect:
            if key not in allowed:
                problems.append(
                    (
                        loc + ("expect", key),
                        f"{key!r} is not "
                        f"{'in the budget' if check.kind == 'op_budget' else 'an expect field'} "
                        f"(choose from {', '.join(sorted(allowed))})",
                    )
                )
    if deviation.instead is not None and check.kind != "invariant":
        problems.append((loc + ("instead",), f"instead is for invariant checks, not {check.kind}"))
    return problems
