"""Batch rules: rows vLLM never produces are record errors that name the rule and point at the
row."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings

from gdn_review.cli import main
from gdn_review.harness.builders import BuilderSettings
from gdn_review.harness.strategies import random_batches
from gdn_review.kb import RecordErrors, load_record, parse_record
from gdn_review.kb.batch_rules import (
    MAX_MODEL_LEN,
    MAX_NUM_BATCHED_TOKENS,
    RULES,
    case_problems,
    runner_order,
)
from gdn_review.kb.cases import Case
from tests.conftest import MINIMAL, ROOT

CASE_BODY = MINIMAL[MINIMAL.index("    text: Two spec decodes.\n") : MINIMAL.index("risks:\n")]
WAIVE = "if on purpose, give the case allow_impossible: <reason>"


def with_case(*rows: str, head: str = "    speculative_tokens: 2\n") -> str:
    """MINIMAL with its one case's settings (``head``) and rows replaced; row i is on line 25 + i
    when ``head`` is one line."""
    body = (
        "    text: A batch.\n" + head + "    rows:\n" + "".join(f"      - {row}\n" for row in rows)
    )
    return MINIMAL.replace(CASE_BODY, body)


TABLE = [
    (
        "query-within-seq",
        with_case("{seq_len: 5, query_len: 9}"),
        [
            "7.yaml:25:33: cases[0].rows[0].query_len: query_len 9 > seq_len "
            "5: seq_len counts the tokens computed before this step and its "
            f"query_len new ones (rule query-within-seq; {WAIVE})"
        ],
    ),
    (
        "drafted-range",
        with_case("{seq_len: 10, query_len: 3, drafted: 3}"),
        [
            "7.yaml:25:46: cases[0].rows[0].drafted: drafted 3 > "
            "speculative_tokens 2: the scheduler gives a row at most k draft "
            f"tokens (rule drafted-range; {WAIVE})"
        ],
    ),
    (
        "drafted-range",
        with_case("{seq_len: 10, query_len: 1, drafted: 0}", head="    max_num_seqs: 8\n"),
        [
            "7.yaml:25:46: cases[0].rows[0].drafted: drafted 0 in a case "
            "without speculative_tokens: no row drafts without a speculative "
            f"config (rule drafted-range; {WAIVE})"
        ],
    ),
    (
        "drafted-range",
        with_case("{seq_len: 10, query_len: 1, drafted: -1}"),
        [
            "7.yaml:25:46: cases[0].rows[0].drafted: Input should be greater "
            "than or equal to 0 (got -1) (rule drafted-range)"
        ],
    ),
    (
        "accepted-range",
        with_case("{seq_len: 10, query_len: 3, drafted: 2, accepted: 4}"),
        [
            "7.yaml:25:59: cases[0].rows[0].accepted: accepted 4 > "
            "speculative_tokens + 1 = 3: a row accepts at most its k drafts "
            f"and one sampled token (rule accepted-range; {WAIVE})"
        ],
    ),
    (
        "accepted-range",
        with_case("{seq_len: 10, query_len: 1, accepted: 2}", head="    max_num_seqs: 8\n"),
        [
            "7.yaml:25:47: cases[0].rows[0].accepted: accepted 2 in a case "
            "without speculative_tokens: without a speculative config every "
            f"row accepted 1 (rule accepted-range; {WAIVE})"
        ],
    ),
    (
        "accepted-range",
        with_case("{seq_len: 10, query_len: 3, drafted: 2, accepted: -1}"),
        [
            "7.yaml:25:59: cases[0].rows[0].accepted: Input should be "
            "greater than or equal to 0 (got -1) (rule accepted-range)"
        ],
    ),
    (
        # 0 only where a discarded async step left it: on a speculating row (PR #51508).
        "accepted-range",
        with_case("{seq_len: 10, query_len: 2, accepted: 0}"),
        [
            "7.yaml:25:47: cases[0].rows[0].accepted: accepted 0 on a row "
            "that does not speculate: only a speculating row of a discarded "
            f"async step accepts 0 (rule accepted-range; {WAIVE})"
        ],
    ),
    (
        "spec-query-len",
        with_case("{seq_len: 10, query_len: 4, drafted: 2}"),
        [
            "7.yaml:25:34: cases[0].rows[0].query_len: query_len 4 of a "
            "speculating row > speculative_tokens + 1 = 3: a speculating row "
            "computes one new token and its drafts (rule spec-query-len; "
            f"{WAIVE})"
        ],
    ),
    (
        "max-model-len",
        with_case("{seq_len: 10, query_len: 3, drafted: 2}", "{seq_len: 300, query_len: 1}"),
        [
            "7.yaml:26:19: cases[0].rows[1].seq_len: seq_len 300 > "
            "max_model_len 256 of the harness's model (a case may raise it: "
            f"max_model_len) (rule max-model-len; {WAIVE})"
        ],
    ),
    (
        "token-budget",
        with_case(*["{seq_len: 256, query_len: 256}"] * 9, head="    max_num_seqs: 9\n"),
        [
            "7.yaml:25:7: cases[0].rows: 2304 query tokens > "
            "max_num_batched_tokens 2048 of the harness's scheduler config "
            f"(rule token-budget; {WAIVE})"
        ],
    ),
    (
        "max-num-seqs",
        with_case(
            "{seq_len: 10, query_len: 1}",
            "{seq_len: 12, query_len: 1}",
            head="    max_num_seqs: 1\n",
        ),
        [
            "7.yaml:25:7: cases[0].rows: 2 rows + 0 padded exceed "
            f"max_num_seqs 1 (rule max-num-seqs; {WAIVE})"
        ],
    ),
    (
        "zero-length-rows",
        with_case("{seq_len: 10, query_len: 3, drafted: 2}", "{seq_len: 12, query_len: 0}"),
        [
            "7.yaml:26:34: cases[0].rows[1].query_len: a zero-length row is "
            "CUDA-graph padding, which the runner puts after every real row: "
            f"use padded_rows (rule zero-length-rows; {WAIVE})"
        ],
    ),
    (
        "two rules, one row",
        with_case("{seq_len: 10, query_len: 4, drafted: 3}"),
        [
            "7.yaml:25:34: cases[0].rows[0].query_len: query_len 4 of a "
            "speculating row > speculative_tokens + 1 = 3: a speculating row "
            "computes one new token and its drafts (rule spec-query-len; "
            f"{WAIVE})",
            "7.yaml:25:46: cases[0].rows[0].drafted: drafted 3 > "
            "speculative_tokens 2: the scheduler gives a row at most k draft "
            f"tokens (rule drafted-range; {WAIVE})",
        ],
    ),
]


@pytest.mark.parametrize(
    "text, messages", [pytest.param(t, m, id=f"{name}-{i}") for i, (name, t, m) in enumerate(TABLE)]
)
def test_impossible_row_message(text, messages):
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    assert [str(e) for e in failure.value.errors] == messages


def test_every_rule_has_a_message_test():
    assert set(RULES) <= {name for name, _, _ in TABLE}


@pytest.mark.parametrize(
    "name, text, messages", TABLE, ids=[f"{name}-{i}" for i, (name, _, _) in enumerate(TABLE)]
)
def test_validate_exits_2_naming_file_line_column_and_rule(name, text, messages, write_record):
    kb = write_record(text)
    result = CliRunner().invoke(main, ["validate", "--kb", str(kb)], catch_exceptions=False)
    assert result.exit_code == 2
    lines = result.output.splitlines()
    for message in messages:
        assert f"{kb / '7.yaml'}:{message[len('7.yaml:') :]}" in lines


def test_allow_impossible_waives_the_rules():
    text = with_case(
        "{seq_len: 5, query_len: 9}",
        head="    speculative_tokens: 2\n    allow_impossible: robustness, "
        "more new tokens than the sequence\n",
    )
    record = parse_record(text, "7.yaml")
    assert record.cases[0].allow_impossible == "robustness, more new tokens than the sequence"


def test_allow_impossible_on_a_possible_batch_is_an_error():
    text = with_case(
        "{seq_len: 10, query_len: 3, drafted: 2}",
        head="    speculative_tokens: 2\n    allow_impossible: just in case\n",
    )
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    assert [str(e) for e in failure.value.errors] == [
        "7.yaml:24:23: cases[0].allow_impossible: the case breaks no "
        "batch rule: remove allow_impossible, so that a later break is "
        "not hidden"
    ]


def test_accepted_is_bounded_by_k_plus_1_not_by_drafted_plus_1():
    # num_accepted_tokens is the previous step's count: a row that drafts 0 now may have accepted k
    # + 1.
    parse_record(with_case("{seq_len: 10, query_len: 1, drafted: 0, accepted: 3}"), "7.yaml")


def test_the_shipped_record_keeps_every_rule():
    record = load_record(ROOT / "kb" / "52078.yaml")
    assert all(case_problems(case) == [] for case in record.cases)


def test_limits_are_the_harness_config():
    settings_ = BuilderSettings()
    assert MAX_MODEL_LEN == settings_.max_model_len
    # harness/builders.py: max_num_batched_tokens=max(2048, max_model_len)
    assert MAX_NUM_BATCHED_TOKENS == max(2048, settings_.max_model_len)


@settings(max_examples=300, deadline=None)
@given(random_batches([1, 2, 3], 8))
def test_random_batches_of_invariant_checks_keep_the_rules(batch):
    case = Case(id="random", text="random", **batch)
    assert case_problems(case) == []
    # Not a rule for records yet (see RULES), but every drawn batch is in a runner's order.
    assert list(runner_order(case)) == []


def _kinds(batch: dict) -> set[str]:
    """The row kinds GDN's classification tells apart, in one drawn batch."""
    kinds = {"padded row"} if batch["padded_rows"] else set()
    for row in batch["rows"]:
        if row.get("drafted") is not None:
            kinds.add(f"spec row drafted {row['drafted']}")
        elif not row.get("prefilling"):
            kinds.add("one-token decode")
        elif row["seq_len"] == row["query_len"]:
            kinds.add("one-token first chunk" if row["query_len"] == 1 else "first chunk")
        else:
            kinds.add("one-token resume" if row["query_len"] == 1 else "continuing chunk")
    return kinds


def test_drawn_batches_put_every_row_kind_beside_the_others():
    # Issue 55: the drawn batches of an invariant (the mirror claims' among them) cover every
    # row kind GDN tells apart, beside each other and beside spec rows of every draft count.
    import random

    from gdn_review.harness.strategies import draw_batch

    rng = random.Random(55)
    drawn = [draw_batch(rng.randint, rng.choice, [2], 8) for _ in range(400)]
    prefilling = {
        "one-token resume",
        "continuing chunk",
        "first chunk",
        "one-token first chunk",
    }
    every = prefilling | {"padded row", "one-token decode"}
    every |= {f"spec row drafted {d}" for d in range(3)}
    assert set().union(*map(_kinds, drawn)) == every
    # Beside each other: every prefilling kind in one batch, and each beside a spec row.
    assert any(prefilling <= _kinds(batch) for batch in drawn)
    for kind in prefilling:
        assert any(
            kind in kinds and any(k.startswith("spec row") for k in kinds)
            for kinds in map(_kinds, drawn)
        ), kind


# ------------------------------------------------------------ runner order (not enforced yet)


def case_of(*rows: dict, k: int | None = 2) -> Case:
    return Case(id="c", text="c", speculative_tokens=k, rows=list(rows))


DECODE = {"seq_len": 10, "query_len": 1, "prefilling": False}
SPEC = {"seq_len": 12, "query_len": 3, "drafted": 2}
EXTEND = {"seq_len": 40, "query_len": 4}  # context 36, still in its prompt
FIRST = {"seq_len": 8, "query_len": 8}  # no context: a first chunk


@pytest.mark.parametrize(
    "rows, k",
    [
        ((SPEC, DECODE, EXTEND, FIRST), 2),  # V1, threshold k + 1
        ((DECODE, EXTEND, FIRST), None),  # V1 without speculation
        (
            (SPEC, DECODE, {"seq_len": 2, "query_len": 2}, EXTEND),
            2,
        ),  # V2: a short first chunk before a longer extend
    ],
)
def test_orders_a_runner_produces(rows, k):
    assert list(runner_order(case_of(*rows, k=k))) == []


def test_a_first_chunk_before_a_shorter_extend_is_no_runner_order():
    # kb/52078.yaml's spec_decode_and_prefill has this shape (rows[3], rows[4]).
    problems = list(runner_order(case_of(SPEC, DECODE, FIRST, EXTEND)))
    assert [loc for loc, _ in problems] == [("rows", 3)]
    assert problems[0][1].startswith("no vLLM model runner puts this row after rows[0..2]")
