"""Broken records and the exact messages people get for them."""

from __future__ import annotations

import pytest

from gdn_review.kb import RecordErrors, load_kb, parse_record
from gdn_review.kb.yaml_source import SAFE_LOADER
from tests.conftest import MINIMAL

# libyaml (the loader where PyYAML has it) and PyYAML's Python parser say this one differently.
UNCLOSED = (
    "did not find expected ',' or ']'"
    if SAFE_LOADER.__name__ == "CSafeLoader"
    else "expected ',' or ']', but got ':'"
)


def broken(old: str, new: str) -> str:
    assert old in MINIMAL, old
    return MINIMAL.replace(old, new, 1)


TABLE = [
    (
        "syntax error",
        broken("  title: A small PR\n", "  title: [unclosed\n"),
        [
            "7.yaml:6:12: YAML syntax error: while parsing a flow sequence "
            f"(started at line 5, column 10): {UNCLOSED}"
        ],
    ),
    (
        "unknown top-level key",
        broken("schema_version: 1\n", "schema_version: 1\nreviewer: me\n"),
        [
            "7.yaml:2:1: reviewer: unknown key 'reviewer' (allowed here: "
            "cases, claims, contract, equivalent_mutants, pr, related, "
            "report, risks, schema_version, summary, target, upstream_tests)"
        ],
    ),
    (
        "unknown key in a check",
        broken("      budget: {aten.ge: 1}\n", "      budget: {aten.ge: 1}\n      max: 3\n"),
        [
            "7.yaml:19:7: claims[0].check.max: unknown key 'max' (allowed "
            "here: budget, cases, kind, per)"
        ],
    ),
    (
        # Its field is named as in every other kind of check (was claims[0].check.latency.max).
        "unknown key in a latency check",
        broken(
            "      kind: op_budget\n      budget: {aten.ge: 1}\n",
            "      kind: latency\n      max: 3\n",
        ),
        [
            "7.yaml:18:7: claims[0].check.max: unknown key 'max' "
            "(allowed here: base, cases, head, kind)"
        ],
    ),
    (
        "wrong type",
        broken("  number: 7\n", "  number: seven\n"),
        [
            "7.yaml:3:11: pr.number: Input should be a valid integer, unable "
            "to parse string as an integer (got 'seven')"
        ],
    ),
    (
        "missing field",
        broken("  symbol: GDNAttentionMetadataBuilder.build\n", ""),
        ["7.yaml:9:3: target.symbol: required field is missing"],
    ),
    (
        "duplicate key",
        broken("  repo: vllm-project/vllm\n", "  repo: vllm-project/vllm\n  repo: other/repo\n"),
        ["7.yaml:5:3: pr.repo: duplicate key 'repo'"],
    ),
    (
        "duplicate claim id",
        broken(
            "cases:\n",
            "  - id: C1\n    text: Again.\n    check: {kind: equivalence, cases: [spec]}\ncases:\n",
        ),
        [
            "7.yaml:20:9: claims[1].id: duplicate id 'C1'",
            "7.yaml:22:40: claims[1].check.cases[0]: case 'spec' states no "
            "expect: an equivalence check needs expected fields; "
            "run gdn-review snapshot --record 7 --fill-expects",
        ],
    ),
    (
        "dangling case of a risk",
        broken(
            "    cases: [spec]\n    claims: [C1]\n",
            "    cases: [spec, nowhere]\n    claims: [C1]\n",
        ),
        ["7.yaml:30:19: risks[0].cases[1]: no case with id 'nowhere' (known: spec)"],
    ),
    (
        "dangling claim of a risk",
        broken("    claims: [C1]\n", "    claims: [C9]\n"),
        ["7.yaml:31:14: risks[0].claims[0]: no claim with id 'C9' (known: C1)"],
    ),
    (
        "bad release range",
        broken("  - id: C1\n", "  - id: C1\n    releases: newer than 0.29\n"),
        [
            "7.yaml:15:15: claims[0].releases: Value error, 'newer than "
            "0.29' is not a release range (for example '>=0.29,<0.32') (got "
            "'newer than 0.29')"
        ],
    ),
    (
        "id that cannot become a name",
        broken("  - id: C1\n", '  - id: "C1; import os"\n').replace(
            "claims: [C1]", 'claims: ["C1; import os"]'
        ),
        [
            "7.yaml:14:9: claims[0].id: String should match pattern "
            "'^[A-Za-z0-9_.-]+$' (got 'C1; import os')",
            "7.yaml:31:14: risks[0].claims[0]: String should match pattern "
            "'^[A-Za-z0-9_.-]+$' (got 'C1; import os')",
        ],
    ),
    (
        "unknown check kind",
        broken("      kind: op_budget\n", "      kind: vibes\n"),
        [
            "7.yaml:17:13: claims[0].check: unknown check kind 'vibes' "
            "(expected one of: 'op_budget', 'equivalence', 'invariant', "
            "'gpu_sync', 'differential', 'latency', 'TODO')"
        ],
    ),
    (
        "alias (and so no alias bomb)",
        broken("  title: A small PR\n", "  title: &t A small PR\n  url2: *t\n"),
        [
            "7.yaml:6:9: YAML aliases (*name) are not allowed in the "
            "knowledge base: write the value out"
        ],
    ),
    (
        "integer too long to read",
        broken("  number: 7\n", "  number: " + "9" * 5000 + "\n"),
        [
            "7.yaml:1:1: YAML value cannot be read: Exceeds the limit (4300 "
            "digits) for integer string conversion: value has 5000 digits; "
            "use sys.set_int_max_str_digits() to increase the limit"
        ],
    ),
    (
        "expected value that is not plain data",
        broken(
            "    speculative_tokens: 2\n", "    speculative_tokens: 2\n    expect: {path: .nan}\n"
        ),
        [
            "7.yaml:24:20: cases[0].expect.path: Value error, expected "
            "values are null, true/false, integers, strings or lists of "
            "them, or a tensor as {dtype: int64, values: [...]}; got float nan (got nan)"
        ],
    ),
    (
        "deviation expecting an op outside the budget",
        broken(
            "      cases: [spec]\n",
            "      cases: [spec]\n    known_deviations:\n      - reason: r\n "
            "       expect: {aten.gt: 2}\n",
        ),
        [
            "7.yaml:22:27: claims[0].known_deviations[0].expect.aten.gt: "
            "'aten.gt' is not in the budget (choose from aten.ge)"
        ],
    ),
    (
        "instead on a check that is not an invariant",
        broken(
            "      cases: [spec]\n",
            "      cases: [spec]\n    known_deviations:\n      - reason: r\n "
            "       instead: partition\n",
        ),
        [
            "7.yaml:22:18: claims[0].known_deviations[0].instead: instead is "
            "for invariant checks, not op_budget"
        ],
    ),
    (
        "empty file",
        "",
        ["7.yaml:1:1: a record is a mapping with pr, target, claims...; got an empty file"],
    ),
]


@pytest.mark.parametrize("text, messages", [pytest.param(t, m, id=name) for name, t, m in TABLE])
def test_broken_record_message(text, messages):
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    assert [str(e) for e in failure.value.errors] == messages


def test_minimal_record_is_valid():
    record = parse_record(MINIMAL, "7.yaml")
    assert record.key == 7 and [c.id for c in record.claims] == ["C1"]


def test_file_name_must_match_pr_number():
    with pytest.raises(RecordErrors) as failure:
        parse_record(MINIMAL, "8.yaml")
    assert (
        str(failure.value.errors[0])
        == "8.yaml:3:11: pr.number: record file is named '8' but pr.number is 7; name it 7.yaml"
    )


def test_every_error_of_every_file_is_collected(write_record):
    write_record(
        broken("  number: 7\n", "  number: seven\n").replace("kind: op_budget", "kind: vibes")
    )
    kb = write_record(
        MINIMAL.replace("number: 7", "number: 9").replace("reviewer", ""), name="9.yaml"
    )
    (kb / "10.yaml").write_text("pr: [\n", encoding="utf-8")
    with pytest.raises(RecordErrors) as failure:
        load_kb(kb)
    files = sorted({e.file.rsplit("/", 1)[-1] for e in failure.value.errors})
    assert files == ["10.yaml", "7.yaml"]
    assert len([e for e in failure.value.errors if e.file.endswith("7.yaml")]) == 2


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(RecordErrors) as failure:
        parse_record("[" * 3000 + "]" * 3000, "7.yaml")
    assert str(failure.value) == "7.yaml:1:1: YAML nested too deeply to be a knowledge-base file"


def test_safe_load_only():
    # A Python object tag is a YAML error, never constructed.
    with pytest.raises(RecordErrors) as failure:
        parse_record("!!python/object/apply:os.system ['echo hi']\n", "7.yaml")
    assert str(failure.value).startswith(
        "7.yaml:1:1: unsupported YAML tag: could not determine a constructor"
    )


def test_open_items_of_a_draft(write_record):
    from gdn_review.kb import load_record, open_items

    draft = MINIMAL.replace("  base_release: 0.28.0\n", "").replace(
        "  file: vllm/v1/attention/backends/gdn_attn.py", "  file: TODO"
    )
    draft = draft.replace(
        "      kind: op_budget\n      budget: {aten.ge: 1}\n      cases: [spec]\n",
        "      kind: TODO\n      hint: count ge\n",
    )
    kb = write_record(draft)
    record = load_record(kb / "7.yaml")
    assert [message for _, message in open_items(record)] == [
        "TODO: target.file is not known yet",
        "TODO: base_release is not set (which vLLM release lacks the PR? "
        '`gdn-review find-release "<a line the PR added>"` prints both)',
        "TODO: claim C1 has no check yet (count ge)",
    ]


# Any text at all gives a record or RecordErrors: never another exception.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LINES = MINIMAL.splitlines(keepends=True)


@st.composite
def mangled_records(draw):
    lines = list(LINES)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "replace", "insert", "indent"]))
        if action == "delete" and len(lines) > 1:
            lines.pop(where)
        elif action == "duplicate":
            lines.insert(where, lines[where])
        elif action == "replace":
            lines[where] = draw(st.text(max_size=40)) + "\n"
        elif action == "insert":
            lines.insert(
                where,
                draw(
                    st.sampled_from(
                        [
                            "  - x\n",
                            "a: &a 1\n",
                            "b: *a\n",
                            "{\n",
                            "- [\n",
                            "k: .nan\n",
                            "  id: 9\n",
                            "\t\n",
                        ]
                    )
                ),
            )
        else:
            lines[where] = "  " + lines[where]
    return "".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=300), mangled_records()))
def test_any_text_gives_a_record_or_record_errors(text):
    try:
        parse_record(text, "7.yaml")
    except RecordErrors as failure:
        assert failure.errors and all(str(e).startswith("7.yaml:") for e in failure.errors)


def test_a_change_naming_an_unknown_case_is_an_error():
    """related[].changes attribute drift to cases: a typo would silently become 'unexplained
    drift'."""
    text = (
        MINIMAL + "related:\n  - number: 9\n    title: Later PR\n    relation: "
        "changes-claim\n    changes:\n      - cases: [spce]\n"
    )
    with pytest.raises(RecordErrors) as caught:
        parse_record(text, "kb/7.yaml")
    assert "related[0].changes[0].cases[0]: no case with id 'spce'" in str(caught.value)
