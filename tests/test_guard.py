"""The whole-file score (`mutate --whole-file`) and contract records: their parts, then one real
run."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gdn_review.common import interrupts
from gdn_review.kb import RecordErrors, load_kb
from gdn_review.kb.changes import contract_problems, load_changes
from gdn_review.kb.load import parse_record
from gdn_review.mutation import guard, guard_lines, guard_notes, operators
from tests.conftest import ROOT

SOURCE = textwrap.dedent('''
    def helper(offsets):
        """Not mutated: a docstring."""
        return sum(offsets[:2])


    class Other:
        def method(self):
            return 1 + 1


    class FakeMetadataBuilder:
        def __init__(self, n):
            self.n = n
            self._setup()

        def _setup(self):
            self.buffer = [0] * self.n

        def build(self, rows, mask, table):
            assert rows is not None, f"rows {rows}"
            if mask is None or len(rows) >= self.n:
                return None
            tail = table[len(rows):]
            tail.fill_(NULL_BLOCK_ID)
            self.buffer[:2] = rows
            self.n -= 1
            return torch.where(mask, rows, table)
''')


def _edits(source: str, broad: bool) -> dict[str, set[str]]:
    lines = set(guard_lines.scope(source)) if broad else set(range(1, len(source.splitlines()) + 1))
    found: dict[str, set[str]] = {}
    for mutant in operators.automatic_mutants(source, lines, broad=broad):
        found.setdefault(mutant.operator, set()).add(f"{mutant.before} -> {mutant.after}")
    return found


def test_broad_operators_plant_each_kind_of_bug():
    edits = _edits(SOURCE, broad=True)
    assert "NULL_BLOCK_ID -> 1" in edits["fill_value"]
    assert "tail.fill_(NULL_BLOCK_ID) -> pass" in edits["drop_statement"]
    assert "self.n -= 1 -> pass" in edits["drop_statement"]
    assert "self.buffer[:2] = rows -> pass" in edits["drop_statement"]
    assert "len(rows): -> :" in edits["slice_whole"]
    assert "mask is None -> (mask is not None)" in edits["is_to_is_not"]
    assert "torch.where(mask, rows, table) -> torch.where(rows, mask, table)" in edits["swap_args1"]
    assert "torch.where(mask, rows, table) -> torch.where(mask, table, rows)" in edits["swap_args2"]
    assert "len(rows) >= self.n -> (len(rows) > self.n)" in edits["ge_to_gt"]
    assert "1 -> 2" in edits["const_plus1"]
    # Messages, docstrings and what is outside a builder class or module-level function: never.
    assert not any("rows {rows}" in edit for group in edits.values() for edit in group)
    assert not any("1 + 1" in edit for group in edits.values() for edit in group)


def test_pr_hunk_mutants_keep_the_narrow_set():
    assert {
        "fill_value",
        "drop_statement",
        "swap_args1",
        "const_plus1",
        "slice_whole",
        "is_to_is_not",
    }.isdisjoint(_edits(SOURCE, broad=False))


def test_scope_is_builder_methods_and_module_functions_without_docstrings():
    scope = guard_lines.scope(SOURCE)
    functions = set(scope.values())
    assert functions == {
        "helper",
        "FakeMetadataBuilder.__init__",
        "FakeMetadataBuilder._setup",
        "FakeMetadataBuilder.build",
    }
    docstring = next(i for i, line in enumerate(SOURCE.splitlines(), 1) if "Not mutated" in line)
    assert docstring not in scope
    assert guard_lines.construction_functions(SOURCE) == {
        "FakeMetadataBuilder.__init__",
        "FakeMetadataBuilder._setup",
    }


def _mutant(source: str, operator: str, before: str):
    found = next(
        m
        for m in guard.catalogue(source, "x.py", guard_notes.Notes())
        if m.operator == operator and before in m.diff
    )
    return found


def test_plan_runs_a_mutant_only_under_the_tests_that_execute_its_edit():
    lines = SOURCE.splitlines()
    fill = next(i for i, line in enumerate(lines, 1) if "tail.fill_" in line)
    ret = next(i for i, line in enumerate(lines, 1) if "return torch.where" in line)
    init = next(i for i, line in enumerate(lines, 1) if "self.n = n" in line)
    by_test = {"t::a": {fill, init}, "t::b": {init}, "t::c": {fill}}
    mutants = [
        _mutant(SOURCE, "drop_statement", "tail.fill_"),
        _mutant(SOURCE, "swap_args1", "torch.where"),
        _mutant(SOURCE, "const_plus1", "[0] * self.n"),
    ]
    notes = guard_notes.Notes(
        unreachable=[guard_notes.Unreachable("return torch.where", "CUDA only", "notes.yaml:1")]
    )
    unreachable, unmatched = guard_notes.unreachable_lines(SOURCE, notes)
    assert unreachable == {ret: "CUDA only"} and not unmatched
    work = guard.plan(mutants, SOURCE, by_test, unreachable, guard_lines.scope(SOURCE))
    assert work.tests[mutants[0].id] == ["t::a", "t::c"]
    assert work.decided[mutants[1].id] == ("unreachable here", "CUDA only")
    # _setup is construction: builders are cached, so every test (None) runs it.
    assert mutants[2].id in work.decided or work.tests[mutants[2].id] is None
    work = guard.plan(mutants, SOURCE, by_test, {}, guard_lines.scope(SOURCE))
    assert work.decided[mutants[1].id][0] == "not reached"


def test_score_counts_timeouts_as_detected_and_leaves_out_equivalents():
    entries = [
        {"status": s}
        for s in [
            "killed",
            "killed",
            "timeout",
            "survived",
            "not reached",
            "equivalent",
            "unreachable here",
            "error",
        ]
    ]
    assert guard.score(entries)["percent"] == 60.0
    assert guard.score([{"status": "equivalent"}])["percent"] is None


def test_bad_notes_name_file_line_and_field(tmp_path):
    notes = tmp_path / "notes.yaml"
    notes.write_text(
        "unreachable:\n  - find: x\nequivalent:\n  auto.a.b.c: ''\nextra: 1\n", encoding="utf-8"
    )
    with pytest.raises(RecordErrors) as failure:
        guard_notes.load_notes(notes)
    messages = [str(e) for e in failure.value.errors]
    assert (
        f"{notes}:2:5: unreachable[0]: expected `find` (a statement's "
        "first line), `reason` and optionally `after` (a line before it)" in messages
    )
    assert any(m.startswith(f"{notes}:4:") and "say why" in m for m in messages)
    assert any(m.startswith(f"{notes}:5:1: extra:") for m in messages)


CONTRACT = """\
schema_version: 1
contract:
  id: {id}
  title: A promise
  covers: [{covers}]
  releases: ">=0.31"
target:
  file: vllm/v1/attention/backends/gdn_attn.py
  symbol: GDNAttentionMetadataBuilder.update_block_table
claims:
  - id: C1
    text: It holds.
    check:
      kind: invariant
      properties: [regather_matches_fresh_build]
"""


def test_a_contract_record_is_keyed_by_its_id_and_needs_no_release():
    record = parse_record(
        CONTRACT.format(id="some_promise", covers="update-block-table"), "some_promise.yaml"
    )
    assert (record.key, record.label, record.state) == (
        "some_promise",
        "contract some_promise",
        "contract",
    )
    with pytest.raises(RecordErrors, match="either pr: .* or contract:"):
        parse_record(
            CONTRACT.format(id="some_promise", covers="x").replace(
                "schema_version: 1\n", "schema_version: 1\npr: {number: 1, repo: a/b, title: t}\n"
            ),
            "some_promise.yaml",
        )
    with pytest.raises(
        RecordErrors, match="contract.id is some_promise; name it some_promise.yaml"
    ):
        parse_record(CONTRACT.format(id="some_promise", covers="x"), "other.yaml")


def test_validate_checks_what_a_contract_covers(tmp_path):
    changes = load_changes(ROOT / "kb")
    records = {}
    for name, covers in [
        ("unknown_entry", "no-such-entry"),
        ("tied_entry", "x"),
        ("fine", "update-block-table"),
    ]:
        path = tmp_path / f"{name}.yaml"
        path.write_text(CONTRACT.format(id=name, covers=covers), encoding="utf-8")
        records[path] = parse_record(path.read_text(encoding="utf-8"), path.name)
    tied = [c for c in changes if c.pr is not None][0]
    tied = tied.model_copy(update={"id": "x"})
    problems = [str(p) for p in contract_problems(records, [*changes, tied])]
    assert len(problems) == 2, problems
    assert any(
        "unknown_entry.yaml:5:12: contract.covers[0]: no entry of "
        "kb/history/changes.yaml has id 'no-such-entry'" in p
        for p in problems
    )
    assert any(
        "tied_entry.yaml:5:12: contract.covers[0]: 'x' is tied to PR #" in p for p in problems
    )


def test_the_bundled_contract_covers_an_untied_change():
    records = load_kb(ROOT / "kb")
    contracts = [r for r in records.values() if r.contract is not None]
    assert contracts and not contract_problems(records, load_changes(ROOT / "kb"))


def test_elsewhere_notes_list_a_reached_mutant_apart(tmp_path):
    notes = tmp_path / "notes.yaml"
    ident = _mutant(SOURCE, "drop_statement", "tail.fill_").id
    notes.write_text(
        f"elsewhere:\n  {ident}: only CUDA shows it\nequivalent:\n  {ident}: twice\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordErrors, match="already under equivalent"):
        guard_notes.load_notes(notes)
    notes.write_text(f"elsewhere:\n  {ident}: only CUDA shows it\n", encoding="utf-8")
    found = {m.id: m for m in guard.catalogue(SOURCE, "x.py", guard_notes.load_notes(notes))}
    assert (found[ident].status, found[ident].reason) == ("unreachable here", "only CUDA shows it")


@pytest.mark.slow
def test_release_runs_in_a_child_on_that_release_and_writes_its_own_report(tmp_path):
    """The smallest run that shows it: runner_inputs' few tests (its baseline about a second;
    update_block_table's took 15 s) and one of its mutants, killed on 0.32.0."""
    command = [
        sys.executable,
        "-m",
        "gdn_review.cli",
        "mutate",
        "--whole-file",
        "--release",
        "0.32.0",
        "--offline",
        "--record",
        "runner_inputs",
        "--mutant",
        "auto.is_not_to_is.m.68ea65",
        "--reports",
        str(tmp_path),
        "--min-score",
        "0",
    ]
    done = interrupts.run_child(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (tmp_path / "guard.json").exists()
    data = json.loads((tmp_path / "guard-0.32.0.json").read_text(encoding="utf-8"))
    assert data["release"] == "0.32.0" and data["mutants"]
    assert {m["status"] for m in data["mutants"]} <= {"killed", "equivalent", "unreachable here"}, (
        data["mutants"]
    )


def test_the_guard_report_escapes_what_it_shows():
    from gdn_review.report import guard_report

    entry = {
        "id": "auto.x.y.1",
        "line": 3,
        "function": "f",
        "status": "survived",
        "reason": "a | b <img src=x> [l](https://e.x)",
        "diff": "```\n- a\n+ b\n",
        "killed_by": [],
    }
    data = {
        "target": "x.py",
        "release": "0.33.0",
        "records": ["#1"],
        "score": guard.score([entry]),
        "mutants": [entry],
        "lines": [
            {
                "line": 3,
                "function": "f",
                "code": "a | `b`",
                "records": [],
                "unreachable": "only <b>CUDA</b> | x",
            }
        ],
        "notes": ["note <script>"],
        "settings": {"jobs": 1, "baseline_s": 1.0},
        "duration_s": 1.0,
        "finished_at": "t",
    }
    text = guard_report.markdown(data)
    assert "<img" not in text and "<script>" not in text and "<b>" not in text
    assert "a \\| b" in text and "\\](https\\:" in text  # no link
    assert "`` a \\| `b` ``" in text  # vLLM's code in a span its backticks cannot close
    table = [line for line in text.splitlines() if line.startswith("| 3 |")]
    assert len(table) == 1 and table[0].count(" | ") == 4, (
        table
    )  # five cells: no | broke out of one
    assert "````" in text  # the diff's own ``` cannot close its fence


def test_an_unreachable_note_after_a_line_marks_only_that_branchs_statement():
    source = textwrap.dedent("""
        def f(backend, x):
            if backend == "a":
                assert x is not None
                return 1
            if backend == "b":
                assert x is not None
                return kernel_b(x)
            assert x is not None
            return 0
        """)
    lines = source.splitlines()
    asserts = [i for i, line in enumerate(lines, 1) if "assert x" in line]
    note = guard_notes.Unreachable(
        "assert x is not None", "kernel_b is CUDA only", "notes.yaml:1", after='if backend == "b":'
    )
    marked, unmatched = guard_notes.unreachable_lines(source, guard_notes.Notes(unreachable=[note]))
    assert set(marked) == {asserts[1]} and not unmatched
    missing = guard_notes.Unreachable(
        "assert x is not None", "r", "notes.yaml:2", after='if backend == "c":'
    )
    _, unmatched = guard_notes.unreachable_lines(source, guard_notes.Notes(unreachable=[missing]))
    assert unmatched and "after 'if backend == \"c\":'" in unmatched[0]


def test_the_line_map_says_under_which_configurations_each_line_ran():
    source = "def f(x):\n    if x:\n        return 1\n    return 2\n"
    by_test = {
        "generated_tests/test_pr_1.py::test_C1_equivalence[cpu-server]": {2, 3},
        "generated_tests/test_pr_1.py::test_C2_invariant[cpu-partition]": {2, 4},
    }
    modules = {"#1": Path("generated_tests/test_pr_1.py")}
    configured = guard_lines.test_configurations(
        by_test, modules, {"#1": {"server": "flashinfer + align prefix caching"}}
    )
    assert configured[next(iter(by_test))] == "flashinfer + align prefix caching"
    rows = guard_lines.line_map(
        source, guard_lines.scope(source), {"m": {2, 3, 4}}, {"m": "#1"}, {}, by_test, configured
    )
    by_line = {row["line"]: row["configurations"] for row in rows}
    assert by_line[3] == ["flashinfer + align prefix caching"]
    assert by_line[4] == ["CPU default"]
    assert by_line[2] == ["CPU default", "flashinfer + align prefix caching"]


def test_a_construction_mutant_runs_the_files_that_executed_its_edit_first():
    args = [
        "generated_tests/test_pr_1.py",
        "generated_tests/test_pr_2.py",
        "generated_tests/test_contract_x.py",
        "-k",
        "cpu",
    ]
    assert guard.ordered_args(args, ["test_contract_x.py"]) == [
        "generated_tests/test_contract_x.py",
        "generated_tests/test_pr_1.py",
        "generated_tests/test_pr_2.py",
        "-k",
        "cpu",
    ]
    assert guard.ordered_args(args, []) == args


def test_the_line_maps_configurations_are_text_in_the_report():
    from gdn_review.report import guard_report

    data = {
        "target": "x.py",
        "release": "0.33.0",
        "records": ["#1"],
        "score": guard.score([]),
        "mutants": [],
        "lines": [
            {
                "line": 3,
                "function": "f",
                "code": "x",
                "records": ["#1"],
                "unreachable": None,
                "configurations": ["a | <b>b</b>", "CPU default"],
            }
        ],
        "notes": [],
        "settings": {"jobs": 1, "baseline_s": 1.0},
        "duration_s": 1.0,
        "finished_at": "t",
    }
    row = next(
        line for line in guard_report.markdown(data).splitlines() if line.startswith("| 3 |")
    )
    assert "<b>" not in row and "a \\| " in row and row.count(" | ") == 4, row


def test_a_records_survivor_that_the_guard_notes_name_is_named_so_not_survived():
    """`gdn-review mutate` (a record's mutants) reads the target file's kb/guard/ notes as the
    whole-file guard does: an unreached survivor on a statement an ``unreachable`` note names is
    "unreachable here" with the note's reason; a reached survivor stays one."""
    from gdn_review import mutation
    from gdn_review.mutation.catalogue import Catalogue

    mutant = _mutant(SOURCE, "swap_args1", "torch.where")
    mutant.status = mutant.reason = None  # a record's mutant: decided by its run
    found = Catalogue(1, "0.34.0", "x.py", [mutant], [], [], source=SOURCE)
    ret = next(i for i, line in enumerate(SOURCE.splitlines(), 1) if "return torch.where" in line)
    notes = guard_notes.Notes(
        unreachable=[guard_notes.Unreachable("return torch.where", "ROCm only", "x.yaml:1")]
    )
    survived = {"status": "survived"}
    assert mutation.result_entry(found, mutant, survived, set())["status"] == "not reached"
    entry = mutation.result_entry(found, mutant, survived, set(), notes)
    assert (entry["status"], entry["reason"]) == ("unreachable here", "ROCm only")
    assert mutation.result_entry(found, mutant, survived, {ret}, notes)["status"] == "survived"
    killed = {"status": "killed", "killed_by": {"C1": ["t::a"]}}
    assert mutation.result_entry(found, mutant, killed, set(), notes)["status"] == "killed"
    equivalent = guard_notes.Notes(equivalent={mutant.id: "same value"})
    entry = mutation.result_entry(found, mutant, survived, {ret}, equivalent)
    assert (entry["status"], entry["reason"]) == ("equivalent", "same value")
