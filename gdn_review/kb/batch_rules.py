"""Batches vLLM can produce: rules for the rows of a case.

``GDNAttentionMetadataBuilder.build()`` trusts its callers, vLLM's model
runners (``v1/worker/gpu_model_runner.py``, and the V2 runner under
``v1/worker/gpu/``, the default from 0.33), so it accepts batches no runner
ever hands it; a case built on one describes nothing real. Each rule states a
guarantee of the runners (read in 0.29.0 and 0.33.0). A case that breaks rules
on purpose (a robustness check) says why with ``allow_impossible: <reason>``;
one that breaks none must not say it, so the waiver cannot hide a later break.

Read and found NOT to hold for every runner or release (so not rules):
- a speculating row's query_len is drafted + 1: V1 only; V2 marks every
  decode with query_len <= k + 1 as speculating (adaptive verification
  changes query_len, not drafted);
- a speculating row is not prefilling: V1 pads a prompt's last token with
  placeholder drafts (``pad_spec_decode``);
- a 1-token decode in a speculative batch speculates (drafted 0): from 0.33's
  runners (``zero_draft_decode_mask``); 0.29's passes -1 for it;
- a speculating row has context (seq_len > query_len): CUDA-graph capture
  builds with seq_len == query_len.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gdn_review.kb.cases import Case, Row

Loc = tuple  # inside the case, e.g. ("rows", 2, "query_len")
Rule = Callable[[Case], Iterator[tuple[Loc, str]]]

# The harness's model config (gdn_review/harness/builders.py; a test keeps them equal):
# the scheduler never goes past either limit.
MAX_MODEL_LEN = 256
MAX_NUM_BATCHED_TOKENS = 2048

WAIVER = "if on purpose, give the case allow_impossible: <reason>"


def query_within_seq(case: Case) -> Iterator[tuple[Loc, str]]:
    for i, row in enumerate(case.rows):
        if row.query_len > row.seq_len:
            yield (
                ("rows", i, "query_len"),
                f"query_len {row.query_len} > seq_len {row.seq_len}: seq_len "
                "counts the tokens computed before this step and its query_len "
                "new ones",
            )


def drafted_range(case: Case) -> Iterator[tuple[Loc, str]]:
    k = case.speculative_tokens
    for i, row in enumerate(case.rows):
        if row.drafted is not None and k is None:
            yield (
                ("rows", i, "drafted"),
                f"drafted {row.drafted} in a case without speculative_tokens: no "
                "row drafts without a speculative config",
            )
        elif row.drafted is not None and row.drafted > k:
            yield (
                ("rows", i, "drafted"),
                f"drafted {row.drafted} > speculative_tokens {k}: the scheduler "
                "gives a row at most k draft tokens",
            )


def accepted_range(case: Case) -> Iterator[tuple[Loc, str]]:
    k = case.speculative_tokens
    for i, row in enumerate(case.rows):
        if k is None and row.accepted != 1:
            yield (
                ("rows", i, "accepted"),
                f"accepted {row.accepted} in a case without speculative_tokens: "
                "without a speculative config every row accepted 1",
            )
        elif row.accepted == 0 and row.drafted is None:
            # Only a speculating row's count comes from a discarded async step's valid sampled
            # count.
            yield (
                ("rows", i, "accepted"),
                "accepted 0 on a row that does not speculate: only a speculating "
                "row of a discarded async step accepts 0",
            )
        elif k is not None and row.accepted > k + 1:
            # The previous step's count: bounded by k + 1, not by this step's drafted + 1.
            yield (
                ("rows", i, "accepted"),
                f"accepted {row.accepted} > speculative_tokens + 1 = {k + 1}: a "
                "row accepts at most its k drafts and one sampled token",
            )


def spec_query_len(case: Case) -> Iterator[tuple[Loc, str]]:
    k = case.speculative_tokens
    for i, row in enumerate(case.rows):
        if row.drafted is not None and k is not None and row.query_len > k + 1:
            yield (
                ("rows", i, "query_len"),
                f"query_len {row.query_len} of a speculating row > speculative_tokens + 1 = "
                f"{k + 1}: a speculating row computes one new token and its drafts",
            )


def max_model_len(case: Case) -> Iterator[tuple[Loc, str]]:
    limit = case.max_model_len or MAX_MODEL_LEN
    for i, row in enumerate(case.rows):
        if row.seq_len > limit:
            yield (
                ("rows", i, "seq_len"),
                f"seq_len {row.seq_len} > max_model_len {limit} of the harness's "
                "model (a case may raise it: max_model_len)",
            )


def token_budget(case: Case) -> Iterator[tuple[Loc, str]]:
    tokens = sum(row.query_len for row in case.rows)
    if tokens > MAX_NUM_BATCHED_TOKENS:
        yield (
            ("rows",),
            f"{tokens} query tokens > max_num_batched_tokens "
            f"{MAX_NUM_BATCHED_TOKENS} of the harness's scheduler config",
        )


def max_num_seqs(case: Case) -> Iterator[tuple[Loc, str]]:
    if len(case.rows) + case.padded_rows > case.max_num_seqs:
        yield (
            ("rows",),
            f"{len(case.rows)} rows + {case.padded_rows} padded exceed "
            f"max_num_seqs {case.max_num_seqs}",
        )


def _prefilling(row: Row) -> bool:
    # As the harness defaults it (harness/case_build.py).
    return (
        row.prefilling
        if row.prefilling is not None
        else (row.drafted is None and row.query_len > 1)
    )


def _first_out_of_order(options: list[list[tuple]]) -> int | None:
    """First row whose sort key (any of its options) cannot follow the rows before it."""
    last = None
    for index, keys in enumerate(options):
        fitting = [key for key in keys if last is None or key >= last]
        if not fitting:
            return index
        last = min(fitting)
    return None


def runner_order(case: Case) -> Iterator[tuple[Loc, str]]:
    k = case.speculative_tokens or 0
    breaks = []
    # V1 (reorder_batch_to_split_decodes_and_prefills): decodes, short extends, long
    # extends, first chunks; the threshold is the smallest any attention group asks, 1..k+1.
    for threshold in range(1, k + 2):
        regions = [
            [
                (
                    3
                    if r.seq_len == r.query_len
                    else 2
                    if r.query_len > threshold
                    else int(_prefilling(r)),
                )
            ]
            for r in case.rows
        ]
        breaks.append(_first_out_of_order(regions))
    # V2 (sort_batch_req_ids): rows with drafts, then query_len == k + 1, then by query_len.
    # A row that does not speculate carries drafts only as a prompt's last token padded
    # with k placeholder drafts (query_len k + 1, prefilling): either key then.
    v2 = []
    for r in case.rows:
        padded = r.drafted is None and k and r.query_len == k + 1 and _prefilling(r)
        v2.append(
            [
                (no_drafts, r.query_len != k + 1, r.query_len)
                for no_drafts in ([False, True] if padded else [not r.drafted])
            ]
        )
    breaks.append(_first_out_of_order(v2))
    if None not in breaks:
        index = max(breaks)
        yield (
            ("rows", index),
            f"no vLLM model runner puts this row after rows[0..{index - 1}]: V1 orders "
            "decodes, then extends of a sequence with context, then first chunks (seq_len == "
            "query_len); V2 orders rows with drafts first, then by query_len",
        )


def zero_length_rows(case: Case) -> Iterator[tuple[Loc, str]]:
    for i, row in enumerate(case.rows):
        if row.query_len == 0:
            yield (
                ("rows", i, "query_len"),
                "a zero-length row is CUDA-graph padding, which the runner puts "
                "after every real row: use padded_rows",
            )


# Enforced rules, by name. runner_order is not among them yet: kb/52078.yaml's cases
# spec_decode_and_prefill and largest_batch put a first chunk before an extend,
# which neither runner does; add it once those cases are reordered and re-measured.
RULES: dict[str, Rule] = {
    "query-within-seq": query_within_seq,
    "drafted-range": drafted_range,
    "accepted-range": accepted_range,
    "spec-query-len": spec_query_len,
    "max-model-len": max_model_len,
    "token-budget": token_budget,
    "max-num-seqs": max_num_seqs,
    "zero-length-rows": zero_length_rows,
}

# Row fields whose lower bound the model itself checks, and the rule that bound belongs to.
FIELD_RULES = {"drafted": "drafted-range", "accepted": "accepted-range"}


def case_problems(case: Case, rules: dict[str, Rule] = RULES) -> list[tuple[Loc, str]]:
    """(location inside the case, message naming the rule) for each rule the case breaks."""
    found = [
        (loc, f"{message} (rule {name}; {WAIVER})")
        for name, rule in rules.items()
        for loc, message in rule(case)
    ]
    if case.allow_impossible is None:
        return found
    if found:
        return []
    return [
        (
            ("allow_impossible",),
            "the case breaks no batch rule: remove allow_impossible, so that "
            "a later break is not hidden",
        )
    ]
