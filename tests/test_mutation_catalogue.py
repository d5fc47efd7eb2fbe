"""Mutant catalogue: automatic operators on the PR's lines, record mutant checks, statuses.

Pure text in, mutants out: no vLLM import, no release download.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from gdn_review import mutation
from gdn_review.kb import parse_record
from gdn_review.mutation import catalogue, operators, reach
from gdn_review.run import suite
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
    assert [line.strip() for hunk in hunks for line in hunk.lines] == [
        "inverse = ~mask",
        "other = rows[inverse]",
        "also = rows[inverse]",
    ]


def test_mutants_only_on_the_pr_lines_and_every_one_compiles():
    lines, gone = operators.map_hunks(operators.pr_hunks(BASE, HEAD), HEAD)
    assert gone == [] and lines == {4, 5, 6}
    mutants = operators.automatic_mutants(HEAD, lines)
    assert {m.operator for m in mutants} == {
        "drop_invert"
    }  # `mask = drafts >= 0` is not the PR's: no ge flip
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
    assert {
        "eq_to_ne",
        "or_to_and",
        "drop_clause1",
        "drop_clause2",
        "drop_invert",
        "invert_mask",
        "slice_upper_plus1",
        "slice_upper_minus1",
        "count_plus1",
        "count_minus1",
        "drop_mask_assign",
    } <= kinds
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
    later = HEAD.replace("inverse = ~mask", "inverse = mask.logical_not()").replace(
        "rows[inverse]", "rows.take(inverse)"
    )
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
    assert 'find: "mask = draft >= 0"' in RECORD_WITH_MUTANTS.splitlines()[line - 1]


def test_a_find_matching_twice_in_its_range_is_a_record_error(tmp_path, record):
    path = tmp_path / "7.yaml"
    path.write_text(RECORD_WITH_MUTANTS, encoding="utf-8")
    doubled = BASE + "\nother = rows[~mask]\n"
    problems = catalogue.find_problems(
        path,
        record.model_copy(
            update={
                "risks": [
                    record.risks[0].model_copy(update={"mutants": [record.risks[0].mutants[2]]})
                ]
            }
        ),
        {"0.28.0": doubled},
    )
    assert len(problems) == 1 and "matches 2 times in vLLM 0.28.0" in str(problems[0])


def test_statuses_on_a_later_release(record):
    later = HEAD.replace("mask = drafts >= 0", "mask = drafts.ge(0)")
    found = {
        m.id: m
        for m in catalogue.record_mutants(record, "0.31.0", later, {"0.29.0": HEAD, "0.30.0": HEAD})
    }
    assert (
        found["flip"].status == "not applicable"
        and found["flip"].reason == "the code changed in 0.31.0"
    )
    assert (
        found["only_old"].status == "not applicable"
        and "written for vLLM <0.29" in found["only_old"].reason
    )
    assert found["harmless"].status == "equivalent" and "only dimension" in found["harmless"].reason
    runnable = catalogue.record_mutants(record, "0.29.0", HEAD, {})
    flip = next(m for m in runnable if m.id == "flip")
    assert (
        flip.status is None
        and "mask = drafts > 0" in flip.source
        and flip.diff.startswith("--- a/")
    )


def test_without_the_releases_in_between_the_change_is_bracketed(record):
    later = HEAD.replace("mask = drafts >= 0", "mask = drafts.ge(0)")
    found = {m.id: m for m in catalogue.record_mutants(record, "0.33.0", later, {"0.29.0": HEAD})}
    assert found["flip"].reason == "the code changed between 0.29.0 and 0.33.0"


def test_validate_reports_a_mutant_find_with_a_typo(write_record):
    """`gdn-review validate` checks finds against the installed release (no download needed)."""
    from click.testing import CliRunner

    from gdn_review.cli import main
    from gdn_review.common import release

    installed, _ = release.loaded()
    text = MINIMAL.replace("head_release: 0.29.0", f"head_release: {installed}").replace(
        "    claims: [C1]\n",
        "    claims: [C1]\n    mutants:\n      - id: typo\n        find: "
        '"spec_sequence_masks_cpu = num_decode_draft_tokens_cpu >= 00"\n '
        '       replace: "x"\n',
    )
    kb = write_record(text)
    result = CliRunner().invoke(main, ["validate", "--kb", str(kb)])
    assert result.exit_code == 2, result.output
    assert (
        f"risks[0].mutants[0].find: mutant 'typo': find matches 0 times in vLLM {installed}'s"
        in result.output
    )
    fixed = text.replace(">= 00", ">= 0")
    kb = write_record(fixed)
    assert CliRunner().invoke(main, ["validate", "--kb", str(kb)]).exit_code == 0


# --- not reached: the baseline's line trace and the statements a mutant edits ---

TRACED = textwrap.dedent(
    """\
    LIMIT = 3


    def used(x):
        if x > 0:
            return x + 1
        return x - 1


    class Plan:
        def unused(self, rows):
            total = 0
            for row in rows:
                total += row
            return total
    """
)


def test_edit_sites_name_the_function_and_skip_what_runs_at_import():
    (site,) = reach.edit_sites(TRACED, TRACED.replace("total += row", "total -= row"))
    assert (site.line, site.function, site.lines) == (14, "Plan.unused", (14,))
    (site,) = reach.edit_sites(TRACED, TRACED.replace("if x > 0:", "if x >= 0:"))
    assert (site.function, site.lines) == ("used", (5,))  # a compound statement: its header only
    assert (
        reach.edit_sites(TRACED, TRACED.replace("LIMIT = 3", "LIMIT = 4")) is None
    )  # module level: runs at import
    assert (
        reach.edit_sites(
            TRACED, TRACED.replace("    def unused", "    @staticmethod\n    def unused")
        )
        is None
    )  # insertion only


def test_the_baseline_trace_tells_a_mutant_no_test_executes_from_one_that_ran(tmp_path):
    package = tmp_path / "tracedpkg"
    package.mkdir()
    (package / "target.py").write_text(TRACED, encoding="utf-8")
    test_file = tmp_path / "test_traced.py"
    test_file.write_text(
        f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom tracedpkg import target\n\n"
        "def test_used():\n    assert target.used(2) == 3\n",
        encoding="utf-8",
    )
    trace = reach.LineTrace({"tracedpkg/target.py"})
    code = pytest.main(suite.pytest_args([test_file], None), plugins=[trace])
    assert code == 0 and trace.active
    reached = trace.reached(test_file, "tracedpkg/target.py")
    assert {5, 6} <= reached and not {7, 12, 13, 14} & reached
    unused = reach.edit_sites(TRACED, TRACED.replace("total += row", "total -= row"))
    assert (
        reach.unreached(unused, reached)
        == "no test executes line 14 of Plan.unused: add a case that reaches it"
    )
    taken = reach.edit_sites(TRACED, TRACED.replace("return x + 1", "return x + 2"))
    assert reach.unreached(taken, reached) is None
    # The branch not taken is a line of a function that ran: still not reached.
    assert reach.unreached(
        reach.edit_sites(TRACED, TRACED.replace("return x - 1", "return x - 2")), reached
    ).startswith("no test executes line 7 of used")
    assert reach.unreached(unused, None) is None  # not traced: nothing is judged


def test_only_a_survivor_is_renamed_not_reached():
    found = catalogue.Catalogue(1, "0.33.0", "tracedpkg/target.py", [], [], [], TRACED)
    mutant = catalogue.Mutant(
        "m", "record", ["R1"], diff="", source=TRACED.replace("total += row", "total -= row")
    )
    entry = mutation.result_entry(
        found, mutant, {"status": "survived", "tests_run": 3}, reached={5, 6}
    )
    assert (entry["status"], entry["reason"]) == (
        "not reached",
        "no test executes line 14 of Plan.unused: add a case that reaches it",
    )
    killed = {"status": "killed", "killed_by": {"C1": ["t"]}, "messages": {"t": "boom"}}
    assert mutation.result_entry(found, mutant, killed, reached={5, 6})["status"] == "killed"
    assert (
        mutation.result_entry(found, mutant, {"status": "survived"}, reached={14})["status"]
        == "survived"
    )
    assert (
        mutation.result_entry(found, mutant, {"status": "survived"}, reached=None)["status"]
        == "survived"
    )


# A release step that carries two PRs' changes: the record's (compute the inverse once)
# and another PR's (a new argument and its test) that no record states.
TWO_PRS = HEAD.replace(
    "def build(drafts, rows):\n",
    "def build(drafts, rows, strict=False):\n    assert not strict or rows is not None\n",
)


def _record_with_own_hunks(anchors: str) -> str:
    return MINIMAL.replace(
        "  head_release: 0.29.0\n", f"  head_release: 0.29.0\n  own_hunks: {anchors}\n"
    )


def test_own_hunks_keep_only_the_prs_hunks_of_a_step_that_carries_others():
    hunks = operators.pr_hunks(BASE, TWO_PRS)
    everything = parse_record(MINIMAL, "kb/7.yaml")
    assert len(catalogue.own_hunks(everything, hunks)) == 2  # no own_hunks: every hunk of the step
    mine = parse_record(_record_with_own_hunks('["inverse = ~mask"]'), "kb/7.yaml")
    kept = catalogue.own_hunks(mine, hunks)
    assert [line.strip() for hunk in kept for line in hunk.lines] == [
        "inverse = ~mask",
        "other = rows[inverse]",
        "also = rows[inverse]",
    ]
    mutants, gone = catalogue.automatic(mine, TWO_PRS, BASE, TWO_PRS)
    assert gone == [] and {m.operator for m in mutants} == {
        "drop_invert"
    }  # none from `not strict or ...`
    assert len(catalogue.automatic(everything, TWO_PRS, BASE, TWO_PRS)[0]) > len(mutants)
    none = parse_record(_record_with_own_hunks("[]"), "kb/7.yaml")
    assert catalogue.automatic(none, TWO_PRS, BASE, TWO_PRS) == ([], [])


def test_an_own_hunks_line_the_step_does_not_add_is_a_record_error(tmp_path):
    text = _record_with_own_hunks('["inverse = ~mask", "mask = drafts >= 0"]')
    path = tmp_path / "7.yaml"
    path.write_text(text, encoding="utf-8")
    (problem,) = catalogue.own_hunk_problems(path, parse_record(text, str(path)), BASE, TWO_PRS)
    assert str(problem).startswith(f"{path}:") and "target.own_hunks[1]" in str(problem)
    assert "'mask = drafts >= 0' is not a line the diff 0.28.0 -> 0.29.0 adds or changes" in str(
        problem
    )
    line = int(str(problem).split(":")[1])
    assert "mask = drafts >= 0" in text.splitlines()[line - 1]


def test_an_own_hunks_line_in_several_blocks_is_a_record_error(tmp_path):
    twice = BASE.replace(
        "    return count, other, also\n",
        "    return count, other, also\n\n\ndef more(rows):\n    inverse "
        "= ~rows\n    return inverse\n",
    )
    head = TWO_PRS.replace(
        "    return count, other, also\n",
        "    return count, other, also\n\n\ndef more(rows):\n    inverse "
        "= ~mask\n    return inverse\n",
    )
    text = _record_with_own_hunks('["inverse = ~mask"]')
    path = tmp_path / "7.yaml"
    path.write_text(text, encoding="utf-8")
    (problem,) = catalogue.own_hunk_problems(path, parse_record(text, str(path)), twice, head)
    assert "is in 2 changed blocks" in str(problem) and "target.own_hunks[0]" in str(problem)
