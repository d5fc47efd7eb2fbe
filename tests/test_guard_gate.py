"""The whole-file guard as a gate: `.ci/run` runs ``mutate --whole-file --min-score 100`` as its own
step after the README's test command, and fails when a mutant that CPU can reach, and that is not
equivalent, escapes every test; it names the mutant and its diff.

The score fell from 100 % to 99.6 % once without anyone noticing (a template edit redrew the
random examples that reached the capture bound): the gate is what notices now. The tests here
check the gate's arithmetic and exit code on fed results; the one marked ``guard_result`` reads
the gate's own reports/guard.json (`.ci/run`'s third step, ``--guard-json``) and is deselected
without it.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.mutation import whole_file

SURVIVOR_DIFF = (
    "--- a/vllm/v1/attention/backends/gdn_attn.py\n"
    "+++ b/vllm/v1/attention/backends/gdn_attn.py\n"
    "@@ -799,3 +799,3 @@\n"
    "-            m.num_reqs <= self.decode_cudagraph_max_bs\n"
    "+            (m.num_reqs < self.decode_cudagraph_max_bs)\n"
)


def _result(*statuses: str) -> dict:
    mutants = [
        {
            "id": f"auto.mutant{i}",
            "status": status,
            "line": 800 + i,
            "function": "GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
            "diff": SURVIVOR_DIFF,
        }
        for i, status in enumerate(statuses)
    ]
    detected = sum(status in ("killed", "timeout") for status in statuses)
    scored = sum(status in ("killed", "timeout", "survived", "not reached") for status in statuses)
    return {
        "mutants": mutants,
        "notes": [],
        "duration_s": 1.0,
        "score": {
            "percent": round(100.0 * detected / scored, 1),
            "detected": detected,
            "scored": scored,
            "counts": {},
        },
    }


def test_one_reachable_survivor_among_thousands_fails_the_gate():
    # 1 of 2,001 rounds to 100.0 %: the gate reads the counts, not the rounded percentage.
    scored = whole_file.Scored(_result(*["killed"] * 2000, "survived"))
    assert scored.data["score"]["percent"] == 100.0
    assert scored.below(100)
    assert [m["id"] for m in scored.escaped()] == ["auto.mutant2000"]


def test_equivalent_and_unreachable_mutants_do_not_fail_the_gate():
    scored = whole_file.Scored(_result("killed", "equivalent", "unreachable here", "timeout"))
    assert not scored.below(100) and scored.escaped() == []
    not_reached = whole_file.Scored(_result("killed", "not reached"))
    assert not_reached.below(100) and not_reached.escaped()[0]["status"] == "not reached"


def test_mutate_whole_file_exits_1_naming_the_survivor_and_its_diff(monkeypatch, tmp_path):
    """The command's exit code and output on a fed result with one reachable survivor."""
    fed = whole_file.Scored(
        _result("killed", "survived", "equivalent"), [tmp_path / "guard.md", tmp_path / "g.json"]
    )
    monkeypatch.setattr(whole_file, "score_and_write", lambda *args, **kwargs: fed)
    done = CliRunner().invoke(
        main,
        [
            "mutate",
            "--whole-file",
            "--min-score",
            "100",
            "--reports",
            str(tmp_path),
            "--generated",
            str(tmp_path / "generated"),
            "--write",
        ],
    )
    assert done.exit_code == 1, done.output
    assert "survived: auto.mutant1, line 801" in done.output
    assert "+            (m.num_reqs < self.decode_cudagraph_max_bs)" in done.output
    assert "below --min-score 100%" in done.output


def test_a_mutant_runs_the_latest_killers_first_then_one_batch_tests_then_random_ones():
    from gdn_review.mutation.guard import kill_order

    tests = [
        "m.py::test_C1_invariant[cpu-partition]",
        "m.py::test_C1_invariant_boundary[cpu-1-row-k=1-partition]",
        "m.py::test_C2_equivalence[cpu-a]",
        "n.py::test_C3_equivalence[cpu-b]",
    ]
    # One batch each (a case, a boundary batch) before the random examples' test.
    assert kill_order(tests, []) == [tests[1], tests[2], tests[3], tests[0]]
    assert kill_order(tests, ["x.py::test_other", tests[3], tests[0]]) == [
        tests[3],
        tests[0],
        tests[1],
        tests[2],
    ]
    # Where the baseline measured each test, the cheapest go first after the latest killers.
    cost = {tests[0]: 0.5, tests[1]: 0.3, tests[2]: 0.01, tests[3]: 0.02}
    assert kill_order(tests, [], cost) == [tests[2], tests[3], tests[1], tests[0]]
    assert kill_order(tests, [tests[0]], cost) == [tests[0], tests[2], tests[3], tests[1]]


def test_a_mutant_tries_the_latest_killers_it_selects_alone_first():
    from gdn_review.mutation.guard import rounds

    every = ["a.py::t1", "a.py::t2", "-x"]
    selected = ["a.py::t1", "a.py::t2"]
    assert rounds(every, [], selected) == [every]
    assert rounds(every, ["a.py::t2"], selected) == [["a.py::t2", "-x"], every]
    # A killer the mutant does not select (or a pseudo test such as an import) is not tried,
    # and at most three go first.
    assert rounds(every, ["b.py::other", "(module import)"], selected) == [every]
    killers = ["a.py::t2", "b.py::other", "a.py::t1", "a.py::t3", "a.py::t4"]
    assert rounds(every, killers, [*selected, "a.py::t3", "a.py::t4"])[0] == [
        "a.py::t2",
        "a.py::t1",
        "a.py::t3",
        "-x",
    ]


@pytest.mark.guard_result
def test_the_guards_run_kills_the_staged_fill_through_the_contract_record(guard_json):
    """What the gate's own run (`.ci/run`'s second step, ``mutate --whole-file --min-score 100``)
    must show beyond its score: update_block_table's staged spec-row fill is killed, and only
    the contract record's tests execute it (two PR records run FULL graphs too)."""
    data = json.loads(guard_json.read_text(encoding="utf-8"))
    assert data["score"]["percent"] == 100.0 and not whole_file.Scored(data).escaped()
    regather = [m for m in data["mutants"] if m["function"].endswith("update_block_table")]
    staged = [m for m in regather if "spec_indices[m.num_spec_decodes :].fill_" in m["diff"]]
    assert staged and all(m["status"] == "killed" for m in staged), staged
    assert all("test_contract_update_block_table" in m["killed_by"][0] for m in staged), staged
    # The decode path's fill is equivalent (kb/guard/notes.yaml says why): never a survivor.
    assert all(m["status"] != "survived" for m in regather), regather
    line_map = {row["line"]: row for row in data["lines"]}
    assert all(line_map[m["line"]]["records"] == ["update_block_table"] for m in staged)


def test_a_mutant_tries_the_tests_that_killed_it_in_the_last_score_first(monkeypatch, tmp_path):
    """The last score's killers, kept outside the tree, go first in a mutant's first round (the
    order only: its selection, and so its verdict, stays the same)."""
    from gdn_review.mutation import guard, runner
    from gdn_review.mutation.catalogue import Mutant

    target = "vllm/v1/attention/backends/gdn_attn.py"
    kept = tmp_path / "guard-killers" / "guard.json"
    whole_file.remember_killers(
        kept,
        target,
        {"auto.gone": ["m.py::test_old"]},
        [
            {"id": "auto.a", "status": "killed", "killed_by": ["m.py::test_far"]},
            {"id": "auto.b", "status": "equivalent", "killed_by": []},
        ],
    )
    remembered = whole_file.last_killers(kept, target)
    assert remembered == {"auto.a": ["m.py::test_far"], "auto.gone": ["m.py::test_old"]}
    assert whole_file.last_killers(kept, "vllm/other.py") == {}
    assert whole_file.last_killers(tmp_path / "none.json", target) == {}

    selected = ["m.py::test_cheap", "m.py::test_mid", "m.py::test_far"]
    cost = {"m.py::test_cheap": 0.01, "m.py::test_mid": 0.02, "m.py::test_far": 0.5}
    mutants = [Mutant("auto.a", "file", [], "", source="x = 1\n", line=1)]
    work = guard.Plan({"auto.a": selected}, {})
    asked = {}

    def run_mutants(mutants, path, tests, jobs, timeout, finished):
        asked["rounds"] = tests(mutants[0])

    monkeypatch.setattr(runner, "run_mutants", run_mutants)
    for last, first_round in ((remembered, ["m.py::test_far", "-x"]), ({}, None)):
        settings = guard.Settings(last_killers=last)
        guard._run(target, {}, mutants, work, cost, selected, settings, runner.Progress())
        if first_round is None:  # nothing kept: the cheapest first, in one round
            assert asked["rounds"] == [[*selected, "-x"]]
        else:
            assert asked["rounds"][0] == first_round
            assert sorted(asked["rounds"][1][:-1]) == sorted(selected)
