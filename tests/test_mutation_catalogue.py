"""Mutant catalogue: automatic operators on the PR's lines, record mutant checks, statuses.

Pure text in, mutants out: no vLLM import, no release download.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from gdn_review.kb import parse_record
from gdn_review.mutation import catalogue, operators
from tests.conftest import MINIMAL

BASE = textwrap.dedent(
    """\
    def build(drafts, rows):
        mask = drafts >= 0
        count = mask.sum()
        other = rows[~mask]
        also = rows[~mask]
        return count, other, also
    """
)
# The "PR": compute the inverse once and reuse it.
HEAD = textwrap.dedent(
    """\
    def build(drafts, rows):
        mask = drafts >= 0
        count = mask.sum()
        inverse = ~mask
        other = rows[inverse]
        also = rows[inverse]
        return count, other, also
    """
)


def test_hunks_are_the_lines_the_pr_added():
    hunks = operators.pr_hunks(BASE, HEAD)
    assert [line.strip() for hunk in hunks for line in hunk.lines] == ["inverse = ~mask", "other = rows[inverse]", "also = rows[inverse]"]


def test_mutants_only_on_the_pr_lines_and_every_one_compiles():
    lines, gone = operators.map_hunks(operators.pr_hunks(BASE, HEAD), HEAD)
    assert gone == [] and lines == {4, 5, 6}
    mutants = operators.automatic_mutants(HEAD, lines)
    assert {m.operator for m in mutants} == {"drop_invert"}  # `mask = drafts >= 0` is not the PR's: no ge flip
    for mutant in mutants:
        ast.parse(mutant.source)
        assert mutant.source != HEAD


def test_operators_cover_comparisons_booleans_masks_slices_and_counts():
    source = textwrap.dedent(
        """\
        def f(a, b, mask, x):
            if a == 0 or b.sum() == 0:
                num_rows = a + b
            keep_mask = ~mask
            return x[mask, 0], x[: a + 1], num_rows, keep_mask
        """
    )
    mutants = operators.automatic_mutants(source, set(range(1, 6)))
    kinds = {m.operator for m in mutants}
    assert {"eq_to_ne", "or_to_and", "drop_clause1", "drop_clause2", "drop_invert", "invert_mask",
            "slice_upper_plus1", "slice_upper_minus1", "count_plus1", "count_minus1", "drop_mask_assign"} <= kinds
    flipped = next(m for m in mutants if m.operator == "or_to_and")
    assert "if (a == 0 and b.sum() == 0):" in flipped.source
    for mutant in mutants:
        ast.parse(mutant.source)


def test_ids_do_not_depend_on_line_numbers():
    lines, _ = operators.map_hunks(operators.pr_hunks(BASE, HEAD), HEAD)
    first = [m.id for m in operators.automatic_mutants(HEAD, lines)]
    shifted = "# a comment added above\n\n" + HEAD
    lines, _ = operators.map_hunks(operators.pr_hunks(BASE, HEAD), shifted)
    assert [m.id for m in operators.automatic_mutants(shifted, lines)] == first
    assert len(set(first)) == len(first)


def test_a_hunk_rewritten_since_yields_no_mutant_and_is_listed():
    later = HEAD.replace("inverse = ~mask", "inverse = mask.logical_not()").replace("rows[inverse]", "rows.take(inverse)")
    lines, gone = operators.map_hunks(operators.pr_hunks(BASE, HEAD), later)
    assert lines == set() and len(gone) == 1 and "inverse = ~mask" in gone[0].label()


RECORD_WITH_MUTANTS = MINIMAL.replace(
    "    claims: [C1]\n",
    """\
    claims: [C1]
    mutants:
      - id: flip
        find: "mask = drafts >= 0"
        replace: "mask = drafts > 0"
      - id: typo
        find: "mask = draft >= 0"
        replace: "mask = draft > 0"
      - id: only_old
        releases: "<0.29"
        find: "other = rows[~mask]"
        replace: "other = rows[mask]"
      - id: harmless
        find: "count = mask.sum()"
        replace: "count = mask.sum(0)"
        equivalent: sums over the only dimension either way
""",
)
assert RECORD_WITH_MUTANTS.count("- id: flip") == 1


@pytest.fixture
def record():
    return parse_record(RECORD_WITH_MUTANTS, "kb/7.yaml")


def test_a_find_that_does_not_match_the_head_release_is_a_record_error(tmp_path, record):
    path = tmp_path / "7.yaml"
    path.write_text(RECORD_WITH_MUTANTS, encoding="utf-8")
    problems = catalogue.find_problems(path, record, {"0.28.0": BASE, "0.29.0": HEAD})
    assert len(problems) == 1
    text = str(problems[0])
    assert text.startswith(f"{path}:") and "risks[0].mutants[1].find" in text
    assert "'typo'" in text and "matches 0 times in vLLM 0.29.0" in text
    line = int(text.split(":")[1])
    assert "find: \"mask = draft >= 0\"" in RECORD_WITH_MUTANTS.splitlines()[line - 1]


def test_a_find_matching_twice_in_its_range_is_a_record_error(tmp_path, record):
    path = tmp_path / "7.yaml"
    path.write_text(RECORD_WITH_MUTANTS, encoding="utf-8")
    doubled = BASE + "\nother = rows[~mask]\n"
    problems = catalogue.find_problems(path, record.model_copy(update={"risks": [record.risks[0].model_copy(update={"mutants": [record.risks[0].mutants[2]]})]}), {"0.28.0": doubled})
    assert len(problems) == 1 and "matches 2 times in vLLM 0.28.0" in str(problems[0])


def test_statuses_on_a_later_release(record):
    later = HEAD.replace("mask = drafts >= 0", "mask = drafts.ge(0)")
    found = {m.id: m for m in catalogue.record_mutants(record, "0.31.0", later, {"0.29.0": HEAD, "0.30.0": HEAD})}
    assert found["flip"].status == "not applicable" and found["flip"].reason == "the code changed in 0.31.0"
    assert found["only_old"].status == "not applicable" and "written for vLLM <0.29" in found["only_old"].reason
    assert found["harmless"].status == "equivalent" and "only dimension" in found["harmless"].reason
    runnable = catalogue.record_mutants(record, "0.29.0", HEAD, {})
    flip = next(m for m in runnable if m.id == "flip")
    assert flip.status is None and "mask = drafts > 0" in flip.source and flip.diff.startswith("--- a/")


def test_without_the_releases_in_between_the_change_is_bracketed(record):
    later = HEAD.replace("mask = drafts >= 0", "mask = drafts.ge(0)")
    found = {m.id: m for m in catalogue.record_mutants(record, "0.33.0", later, {"0.29.0": HEAD})}
    assert found["flip"].reason == "the code changed between 0.29.0 and 0.33.0"


def test_validate_reports_a_mutant_find_with_a_typo(write_record):
    """`gdn-review validate` checks finds against the installed release (no download needed)."""
    from click.testing import CliRunner

    from gdn_review import release_cache
    from gdn_review.cli import main

    installed, _ = release_cache.loaded()
    text = MINIMAL.replace("head_release: 0.29.0", f"head_release: {installed}").replace(
        "    claims: [C1]\n",
        '    claims: [C1]\n    mutants:\n      - id: typo\n        find: "spec_sequence_masks_cpu = num_decode_draft_tokens_cpu >= 00"\n        replace: "x"\n',
    )
    kb = write_record(text)
    result = CliRunner().invoke(main, ["validate", "--kb", str(kb)])
    assert result.exit_code == 2, result.output
    assert f"risks[0].mutants[0].find: mutant 'typo': find matches 0 times in vLLM {installed}'s" in result.output
    fixed = text.replace(">= 00", ">= 0")
    kb = write_record(fixed)
    assert CliRunner().invoke(main, ["validate", "--kb", str(kb)]).exit_code == 0
