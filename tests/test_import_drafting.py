"""drafting.py: which sentences become claims, with which hint and source (the shapes: a speed
figure, what moves, what stays)."""

from __future__ import annotations

import json

import pytest
import yaml

from gdn_review.importers.drafting import LATENCY_HINT, MOVES_HINT, STAYS_HINT, draft_claims, hint
from gdn_review.importers.gh_pr import import_gh_pr
from gdn_review.kb import is_draft, parse_record

# Test inputs, not PR data.


@pytest.mark.parametrize(
    "sentence",
    [
        "build() takes ~900µs on main.",
        "build() takes ~300μs with the PR.",  # Greek mu
        "The step goes from 900us to 300us.",
        "Each call costs 0.3 ms.",
        "e2e output throughput improves 61% at batch size 1.",
        "Decode is 1.5x faster.",
        "在并发场景下吞吐量约有 1% 的提升。",
    ],
)
def test_a_timing_or_a_speed_figure_is_a_latency_claim(sentence):
    assert hint(sentence).startswith(LATENCY_HINT)
    assert "latency or gpu_sync" not in hint(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "100% of the rows are decodes.",
        "It has 16 groups and 3 users.",
        "Version 2.5 ships in 3 months.",
    ],
)
def test_a_figure_that_is_no_timing_or_speed_is_no_latency_claim(sentence):
    assert LATENCY_HINT not in (hint(sentence) or "")


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("This compute can be moved one level up out of each group build().", MOVES_HINT),
        ("Move GDN common metadata compute out of per-group build", MOVES_HINT),
        (
            "Compute the masks once per step instead of recomputing them "
            "inside each group's build().",
            MOVES_HINT,
        ),
        (
            "Only the block_table dependent state index gathers stay per-group in build().",
            STAYS_HINT,
        ),
        ("The state gathers remain per group.", STAYS_HINT),
    ],
)
def test_what_moves_and_what_stays(sentence, expected):
    assert hint(sentence).startswith(expected)


def test_a_sentence_of_several_shapes_is_one_claim_with_every_hint():
    sentence = "Moving the cumsums out of each group build() saves ~600µs."
    claims = draft_claims(
        [(sentence, "PR title"), (sentence, "PR body"), ("Nothing here.", "PR body")]
    )
    assert len(claims) == 1
    assert claims[0]["text"] == sentence and claims[0]["source"] == f"PR title: '{sentence}'"
    assert claims[0]["check"] == {"kind": "TODO", "hint": f"{LATENCY_HINT}; or {MOVES_HINT}"}


def test_other_claims_keep_their_plain_source_and_a_long_quote_is_cut():
    claims = draft_claims(
        [
            ("The mask is computed once instead of twice.", "Motivation"),
            ("It takes ~9µs " + "x" * 400 + ".", "Motivation"),
        ]
    )
    assert claims[0]["source"] == "Motivation"
    assert claims[1]["source"].startswith("Motivation: 'It takes ~9µs xxx") and claims[1][
        "source"
    ].endswith("…'")
    assert len(claims[1]["source"]) == len("Motivation: ''") + 300


def test_a_strangers_description_only_ever_becomes_strings():
    body = (
        "build() takes ~900µs': {a: *x, b: "
        "!!python/object/apply:os.system [echo pwned]} # not a "
        "comment\n\n"
        "Only the gathers stay per-group in build(). \"quoted\" 'too' `code`: |\n  - item"
    )
    data = {
        "number": 7,
        "title": "T",
        "url": "https://github.com/a/b/pull/7",
        "mergedAt": None,
        "body": body,
    }
    text = import_gh_pr(json.dumps(data), "pr.json")
    record = parse_record(text, "7.yaml")
    assert is_draft(record)
    sources = [claim["source"] for claim in yaml.safe_load(text)["claims"]]
    assert (
        sources[0] == "PR body: 'build() takes ~900µs': {a: *x, b: "
        "!!python/object/apply:os.system [echo pwned]} # not a comment'"
    )
    assert [c.check.hint.split(":")[0] for c in record.claims] == ["latency", "equivalence"]
