"""The history page without vLLM: PRs per release, what moved and who explains it, relations
checked, verdicts, op counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import published
from gdn_review.matrix import history, history_sources, matrix, matrix_files, release_plan
from gdn_review.report import report
from gdn_review.run import evidence_file
from gdn_review.run.selection import load_records
from tests.conftest import MATRIX_RECORD, write_matrix_evidence, write_matrix_snapshot

# A second record, of the later PR #9 that the first names: it says its change moves `spec`'s
# num_decodes from 0.31.0 (the first record's relation says the same), and names a PR #11
# that claims to change none of its cases.
LATER = (
    MATRIX_RECORD.replace("number: 7", "number: 9")
    .replace("title: A small PR", "title: Later change")
    .replace("base_release: 0.28.0", "base_release: 0.30.0")
    .replace("head_release: 0.29.0", "head_release: 0.31.0")
    .replace("url: https://example.invalid/pr/7", "url: https://example.invalid/pr/9")
    .replace(
        "  - number: 9\n    title: Later change\n    relation: "
        "changes-claim\n    from_release: 0.31.0\n"
        "    changes:\n      - cases: [spec]\n        fields: [num_decodes]\n",
        "  - number: 11\n    title: Cosmetic refactor\n    relation: "
        "same-area\n    from_release: 0.31.0\n",
    )
)
assert "number: 11" in LATER

SPEC = {"num_decodes": 0, "path": "spec"}
PLAIN = {"num_prefills": 0, "path": "non_spec"}


def _matrix(folder: Path, number: int, runs, snapshots_by_version) -> None:
    folder.mkdir(parents=True)
    entries = []
    for version, role, outcome, ge in runs:
        evidence = write_matrix_evidence(folder, version, outcome, ge)
        data = json.loads((folder / evidence).read_text(encoding="utf-8"))
        for test in data["tests"]:
            test["record"] = number
        (folder / evidence).write_text(json.dumps(data), encoding="utf-8")
        entries.append(
            {
                "version": version,
                "role": role,
                "source": "unpacked on PYTHONPATH",
                "claims_on_any_release": role == "base",
                "evidence": evidence,
                "snapshot": write_matrix_snapshot(folder, version, *snapshots_by_version[version]),
                "summary": "",
                "pytest_exit": 0,
                "duration_s": 1.0,
            }
        )
    (folder / "matrix.json").write_text(
        json.dumps(
            {
                "format": matrix_files.MATRIX_FORMAT,
                "record": number,
                "releases": entries,
                "downloaded": [],
                "jobs": 2,
                "duration_s": 3.0,
                "target_diff": None,
            }
        ),
        encoding="utf-8",
    )


@pytest.fixture
def kb_and_work(tmp_path, write_record, monkeypatch):
    """Two records' matrix runs as `gdn-review matrix --all` leaves them (WORK/matrix-N); the
    package index (pip's answer, monkeypatched) serves up to 0.31.0, where the runs end."""
    monkeypatch.setattr(published, "_index_versions", lambda timeout: ["0.31.0", "0.30.0"])
    write_record(MATRIX_RECORD)
    kb = write_record(LATER, "9.yaml")
    work = tmp_path / "work"
    moved = {**SPEC, "num_decodes": 2}
    _matrix(
        work / "matrix-7",
        7,
        [
            ("0.28.0", "base", "failed", 2),
            ("0.29.0", "head", "passed", 1),
            ("0.30.0", "later", "passed", 1),
            ("0.31.0", "later", "passed", 1),
        ],
        {
            "0.28.0": (SPEC, PLAIN),
            "0.29.0": (SPEC, PLAIN),
            "0.30.0": (SPEC, {**PLAIN, "num_prefills": 1}),  # no PR explains it
            "0.31.0": (moved, {**PLAIN, "num_prefills": 1}),  # #9, as #7's relation says
        },
    )
    _matrix(
        work / "matrix-9",
        9,
        [("0.30.0", "base", "passed", 1), ("0.31.0", "head", "passed", 1)],
        {
            "0.30.0": (SPEC, PLAIN),
            "0.31.0": (SPEC, PLAIN),  # none of #9's cases move: #11 changes none, as said
        },
    )
    return kb, work


def test_each_release_lists_its_prs_what_moved_and_who_explains_it(kb_and_work):
    kb, work = kb_and_work
    records = load_records(kb)
    data = history.history_data(records, history_sources.load_matrices(records, work))
    assert data["releases"] == ["0.28.0", "0.29.0", "0.30.0", "0.31.0"]
    by_version = {r["version"]: r for r in data["per_release"]}
    assert [p["number"] for p in by_version["0.29.0"]["prs"]] == [7]
    assert [p["number"] for p in by_version["0.31.0"]["prs"]] == [9, 11]
    assert by_version["0.28.0"]["prs"] == [] and by_version["0.30.0"]["prs"] == []
    # 0.29.0 -> 0.30.0: num_prefills of `plain` moved and no PR is said to have moved it.
    (unexplained,) = data["unexplained"]
    assert (unexplained["record"], unexplained["from"], unexplained["to"], unexplained["case"]) == (
        7,
        "0.29.0",
        "0.30.0",
        "plain",
    )
    (moved,) = [m for m in by_version["0.31.0"]["moved"]]
    assert moved["case"] == "spec" and [e["number"] for e in moved["explained_by"]] == [9]


def test_a_relation_is_checked_against_the_matrix_of_the_record_that_names_it(kb_and_work):
    kb, work = kb_and_work
    records = load_records(kb)
    data = history.history_data(records, history_sources.load_matrices(records, work))
    prs = {p["number"]: p for p in data["per_release"][-1]["prs"]}
    (said_by_7,) = prs[9]["named_by"]
    assert said_by_7["checked"].startswith("confirmed: 1 case(s) of #7 moved 0.30.0 → 0.31.0")
    (said_by_9,) = prs[11]["named_by"]
    assert said_by_9["says"] == [] and said_by_9["checked"].startswith(
        "confirmed: changes none of #9's cases"
    )


def test_a_relation_that_claims_no_change_is_contradicted_when_a_case_moves(kb_and_work):
    kb, work = kb_and_work
    snapshot = work / "matrix-9" / "snapshot-0.31.0.json"
    data = json.loads(snapshot.read_text(encoding="utf-8"))
    data["cases"]["spec"]["num_decodes"] = 5
    snapshot.write_text(json.dumps(data), encoding="utf-8")
    records = load_records(kb)
    page = history.history_data(records, history_sources.load_matrices(records, work))
    prs = {p["number"]: p for p in page["per_release"][-1]["prs"]}
    assert prs[11]["named_by"][0]["checked"].startswith("contradicted: 1 case(s) of #9 moved")


def test_the_page_shows_verdicts_per_release_op_counts_and_a_chart(kb_and_work):
    kb, work = kb_and_work
    records = load_records(kb)
    text = report.render_history(
        history.history_data(records, history_sources.load_matrices(records, work))
    )
    for version in ("0.28.0", "0.29.0", "0.30.0", "0.31.0"):
        assert f"## vLLM {version}\n" in text
    assert "**1 unexplained change(s)**" in text
    assert (
        "| [#7](matrix/7.md) | C1 | op_budget | **fails** | holds | holds | holds | discriminates |"
        in text
    )
    assert "| #7 | C1 | `aten.ge` | ≤ 1 | 2 | 1 | 1 | 1 |" in text
    assert "```mermaid\nxychart-beta\n" in text and "line [2, 1, 1, 1]" in text
    assert (
        "line [" not in text.split("line [2, 1, 1, 1]")[1]
    )  # #9 ran on two releases only: table, not chart


def test_since_leaves_out_older_releases_and_a_record_without_a_matrix_run_is_named(kb_and_work):
    kb, work = kb_and_work
    (work / "matrix-9" / "matrix.json").unlink()
    records = load_records(kb)
    data = history.history_data(
        records, history_sources.load_matrices(records, work), since="0.30.0"
    )
    assert data["releases"] == ["0.30.0", "0.31.0"]
    assert list(data["missing"]) == [9] and "gdn-review matrix --record 9" in data["missing"][9]


def test_history_command_writes_the_page_and_exits_1_on_unexplained_drift(kb_and_work, tmp_path):
    kb, work = kb_and_work
    out = tmp_path / "reports" / "history.md"
    result = CliRunner().invoke(
        main, ["history", "--kb", str(kb), "--work", str(work), "--out", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "history: 4 releases (0.28.0 .. 0.31.0), 3 PRs, 1 unexplained change(s)" in result.output
    assert out.read_text(encoding="utf-8").startswith(
        "# The GDN builder's history, vLLM 0.28.0 to 0.31.0"
    )
    relaxed = CliRunner().invoke(
        main,
        ["history", "--kb", str(kb), "--work", str(work), "--out", str(out), "--fail-on", "none"],
    )
    assert relaxed.exit_code == 0, relaxed.output


def test_the_window_ends_at_the_newest_published_release_and_says_where_runs_stop_short(
    kb_and_work, tmp_path
):
    kb, work = kb_and_work
    records = load_records(kb)
    matrices = history_sources.load_matrices(records, work)
    shorter = history.history_data(records, matrices, newest="0.30.0")
    assert shorter["releases"][-1] == "0.30.0" and shorter["newest_not_run"] is None
    ahead = history.history_data(records, matrices, newest="0.32.0")
    assert ahead["releases"][-1] == "0.31.0" and ahead["newest_not_run"] == "0.32.0"
    assert (
        "**vLLM 0.32.0 is the newest published release and no matrix run has it**"
        in report.render_history(ahead)
    )
    out = tmp_path / "history.md"
    args = ["history", "--kb", str(kb), "--work", str(work), "--out", str(out), "--offline"]
    with_index = CliRunner().invoke(main, args[:-1] + ["--fail-on", "none"])
    assert "the history's window ends at vLLM 0.31.0, the newest release the package index " in (
        with_index.output
    )
    assert "no matrix run has it" not in with_index.output
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(published, "_index_versions", lambda timeout: ["0.32.0", "0.31.0"])
        behind = CliRunner().invoke(main, args[:-1] + ["--fail-on", "none"])
        page = out.read_text(encoding="utf-8")
        patch.setattr(published, "newest_local", lambda: "0.31.0")
        offline = CliRunner().invoke(main, args + ["--fail-on", "none"])  # the index not asked
    assert behind.exit_code == 0, behind.output
    assert (
        "vLLM 0.32.0 is the newest published release and no matrix run has it: run "
        "gdn-review matrix --all"
    ) in behind.output
    assert "no matrix run has it**: the\npage ends at 0.31.0" in page
    assert offline.exit_code == 0 and "no matrix run has it" not in offline.output
    assert "the history's window ends at vLLM 0.31.0, the newest release at hand" in offline.output


def test_history_without_any_matrix_run_is_bad_input(write_record, tmp_path):
    kb = write_record(MATRIX_RECORD)
    result = CliRunner().invoke(
        main,
        [
            "history",
            "--offline",
            "--kb",
            str(kb),
            "--work",
            str(tmp_path / "nothing"),
            "--out",
            str(tmp_path / "h.md"),
        ],
    )
    assert result.exit_code == 2
    assert "gdn-review matrix --all" in result.output
    assert not (tmp_path / "h.md").exists()


def test_matrix_refuses_both_or_neither_of_record_and_all(write_record):
    kb = write_record(MATRIX_RECORD)
    for args in ([], ["--all", "--record", "7"]):
        result = CliRunner().invoke(main, ["matrix", "--kb", str(kb), *args])
        assert result.exit_code == 2 and "--record N (repeatable) or --all" in result.output


def _add_field(work: Path, version: str) -> None:
    for number in (7, 9):
        path = work / f"matrix-{number}" / f"snapshot-{version}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        for case in data["cases"].values():
            case["new_field"] = None
        path.write_text(json.dumps(data), encoding="utf-8")


def test_a_field_that_appears_is_unattributed_until_a_noted_change_adds_it(kb_and_work):
    kb, work = kb_and_work
    _add_field(work, "0.31.0")
    records = load_records(kb)
    data = history.history_data(records, history_sources.load_matrices(records, work))
    assert [(u["to"], u["fields"]) for u in data["unexplained"] if u["record"] is None] == [
        ("0.31.0", ["new_field"])
    ]
    (kb / "history").mkdir()
    (kb / "history" / "changes.yaml").write_text(
        "schema_version: 1\nchanges:\n"
        "  - release: 0.31.0\n    what: A new field.\n    fields: [new_field]\n"
        "    pr: {number: 12, title: Adds it, evidence: high, why: the thread quotes the hunk}\n"
        '  - release: 0.31.0\n    what: A refactor nobody could tie.\n    searched: ["a query"]\n',
        encoding="utf-8",
    )
    from gdn_review.kb.changes import load_changes

    data = history.history_data(
        records, history_sources.load_matrices(records, work), changes=load_changes(kb)
    )
    assert [u for u in data["unexplained"] if u["record"] is None] == []
    last = data["per_release"][-1]
    assert last["schema"]["added"] == [{"field": "new_field", "by": "#12"}]
    text = report.render_history(data)
    assert (
        "`new_field` (#12)" in text
        and "| none found | A refactor nobody could tie. | searched: a query |" in text
    )


def test_a_noted_change_without_a_pr_must_say_what_was_searched(tmp_path):
    from gdn_review.kb import RecordErrors
    from gdn_review.kb.changes import load_changes

    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "changes.yaml").write_text(
        "schema_version: 1\nchanges:\n  - release: 0.31.0\n    what: "
        "Guessed.\n  - release: nope\n    what: x\n    searched: [q]\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordErrors) as failure:
        load_changes(tmp_path)
    lines = [str(e) for e in failure.value.errors]
    assert any(
        line.startswith(f"{tmp_path / 'history' / 'changes.yaml'}:3:")
        and "never attribute by guess" in line
        for line in lines
    ), lines
    assert any(
        ":5:14:" in line and "changes[1].release" in line and "not a release number" in line
        for line in lines
    ), lines


def test_the_kb_notes_validate():
    from gdn_review.kb.changes import load_changes
    from tests.conftest import ROOT

    changes = load_changes(ROOT / "kb")
    assert changes and all(c.pr is not None or c.searched for c in changes)


@pytest.mark.slow
def test_matrix_all_runs_records_that_share_a_release_in_one_session_and_writes_the_history(
    write_record, tmp_path
):
    from tests.conftest import MINIMAL

    write_record(MINIMAL)
    kb = write_record(
        MINIMAL.replace("number: 7", "number: 8").replace(
            "https://example.invalid/pr/7", "https://example.invalid/pr/8"
        ),
        "8.yaml",
    )
    work, reports = tmp_path / "work", tmp_path / "reports"
    generated = tmp_path / "generated"
    result = CliRunner().invoke(
        main,
        [
            "matrix",
            "--all",
            "--kb",
            str(kb),
            "--vllm",
            "0.33.0",
            "--generated",
            str(generated),
            "--write",
            "--work",
            str(work),
            "--reports",
            str(reports / "matrix"),
            "--history",
            str(reports / "history.md"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "running 2 release runs of 2 records in 1 sessions" in result.output
    for number in (7, 8):
        folder = work / f"matrix-{number}"
        evidence = json.loads((folder / "evidence-0.33.0.json").read_text(encoding="utf-8"))
        assert evidence["tests"] and {t["record"] for t in evidence["tests"]} == {number}
        assert all(key.startswith(f"{number}:") for key in evidence["claims"])
        snapshot = json.loads((folder / "snapshot-0.33.0.json").read_text(encoding="utf-8"))
        assert snapshot["record"] == number and "spec" in snapshot["cases"]
        entry = json.loads((folder / "matrix.json").read_text(encoding="utf-8"))["releases"][0]
        assert entry["shared_with"] == 1 and "one session of 2 records" in entry["summary"]
    page = (reports / "history.md").read_text(encoding="utf-8")
    assert (
        page.startswith("# The GDN builder's history, vLLM 0.33.0 to 0.33.0")
        and "| [#7](matrix/7.md) | C1 | op_budget | holds |" in page
    )


def test_a_shared_sessions_evidence_is_cut_to_each_record_with_its_own_exit_code():
    data = {
        "format": "gdn-review-evidence/1",
        "pytest_exit_status": 1,
        "environment": {"vllm_version": "0.33.0"},
        "tests": [
            {"nodeid": "a::t[1]", "record": 7, "claim": "C1", "outcome": "passed"},
            {"nodeid": "b::t[1]", "record": 9, "claim": "C1", "outcome": "failed"},
        ],
        "claims": {"7:C1": {"tests": ["a::t[1]"]}, "9:C1": {"tests": ["b::t[1]"]}},
        "risks": {"7:R1": {"tests": ["a::t[1]"]}},
    }
    mine = evidence_file.record_slice(data, 7)
    assert (
        [t["nodeid"] for t in mine["tests"]] == ["a::t[1]"]
        and list(mine["claims"]) == ["7:C1"]
        and list(mine["risks"]) == ["7:R1"]
    )
    assert mine["pytest_exit_status"] == 0  # the other record's failure is not this one's
    assert (
        evidence_file.record_slice(data, 9)["pytest_exit_status"] == 1
        and evidence_file.record_slice(data, 11)["pytest_exit_status"] == 5
    )
    assert (
        matrix.outcome_summary(mine["tests"], 12.34, 2)
        == "1 passed (one session of 2 records, 12.3s)"
    )


def test_an_open_prs_releases_after_its_base_are_later(write_record):
    kb = write_record(
        MATRIX_RECORD.replace("  head_release: 0.29.0\n", "").replace(
            "url: https://example.invalid/pr/7\n",
            "url: https://example.invalid/pr/7\n  state: open\n",
        )
    )
    record = load_records(kb)[kb / "7.yaml"]
    assert [(p.version, p.role) for p in release_plan.plan(record, "0.30.0", newest="0.30.0")] == [
        ("0.28.0", "base"),
        ("0.29.0", "later"),
        ("0.30.0", "later"),
    ]


@pytest.mark.slow
def test_a_module_that_breaks_in_a_shared_session_leaves_the_others_their_tests(
    write_record, tmp_path
):
    from gdn_review import generate
    from tests.conftest import MINIMAL

    kb = write_record(MINIMAL)
    generated = tmp_path / "generated"
    generate.apply(generate.plan(kb, generated))
    broken = tmp_path / "broken" / "test_pr_8.py"
    broken.parent.mkdir()
    broken.write_text("raise RuntimeError('this module does not import')\n", encoding="utf-8")
    (kb / "8.yaml").write_text(MINIMAL.replace("number: 7", "number: 8"), encoding="utf-8")
    item = release_plan.Planned("0.33.0", "later", True)
    outs = [tmp_path / "w7", tmp_path / "w8"]
    for out in outs:
        out.mkdir()
    first, second = matrix.run_group(
        item,
        None,
        [(generated / "test_pr_7.py", kb / "7.yaml", outs[0]), (broken, kb / "8.yaml", outs[1])],
    )
    assert first["pytest_exit"] == 0 and "one session of 2 records" in first["summary"]
    evidence = json.loads((outs[0] / first["evidence"]).read_text(encoding="utf-8"))
    assert evidence["tests"] and {t["record"] for t in evidence["tests"]} == {7}
    assert (
        "run alone: the shared session gave it no tests" in second["summary"]
        and second["pytest_exit"] != 0
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("changes: [1\n", "YAML syntax error"),
        (
            "changes:\n  - release: 0.31.0\n    what: &a x\n    searched: [*a]\n",
            "aliases (*name) are not allowed",
        ),
        (
            "schema_version: 1\nchanges:\n  - release: 0.31.0\n    what: x\n "
            "   searched: [q]\n    pr_number: " + "9" * 5000 + "\n",
            "YAML value cannot be read",
        ),
        ("- just a list\n", "expected a mapping with schema_version and changes; got list"),
        (
            "schema_version: 1\nchanges:\n  - release: 0.31.0\n    what: x\n "
            "   searched: [q]\n    who: me\n",
            "changes[0].who: unknown key 'who'",
        ),
    ],
)
def test_a_malformed_changes_file_is_a_file_line_error_never_a_traceback(tmp_path, text, message):
    from gdn_review.kb import RecordErrors
    from gdn_review.kb.changes import load_changes

    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "changes.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(RecordErrors) as failure:
        load_changes(tmp_path)
    assert any(
        str(e).startswith(str(tmp_path / "history" / "changes.yaml") + ":") and message in str(e)
        for e in failure.value.errors
    ), failure.value.errors


def test_validate_refuses_a_relation_whose_release_contradicts_the_named_prs_record(write_record):
    write_record(MATRIX_RECORD)
    kb = write_record(
        LATER.replace("base_release: 0.30.0", "base_release: 0.29.0").replace(
            "head_release: 0.31.0", "head_release: 0.30.0"
        ),
        "9.yaml",
    )
    result = CliRunner().invoke(main, ["validate", "--kb", str(kb)])
    assert result.exit_code == 2, result.output
    assert (
        "7.yaml:" in result.output
        and "related[0].from_release: #9 first shipped in 0.30.0 by its own record" in result.output
    )


def test_a_run_whose_record_changed_since_or_that_ran_part_of_it_is_left_out(kb_and_work):
    import hashlib

    kb, work = kb_and_work
    for number in (7, 9):
        path = work / f"matrix-{number}" / "matrix.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["record_sha256"] = hashlib.sha256((kb / f"{number}.yaml").read_bytes()).hexdigest()
        data["keyword"] = "C1" if number == 9 else None
        path.write_text(json.dumps(data), encoding="utf-8")
    records = load_records(kb)
    matrices = history_sources.load_matrices(records, work)
    assert list(matrices.reports) == [7] and "only part of the record ran" in matrices.missing[9]
    (kb / "7.yaml").write_text(
        (kb / "7.yaml").read_text(encoding="utf-8") + "# edited\n", encoding="utf-8"
    )
    with pytest.raises(history_sources.HistoryError):  # nothing current is left to read
        history_sources.load_matrices(load_records(kb), work)


def test_a_release_that_could_not_run_confirms_nothing_and_is_an_error(kb_and_work, tmp_path):
    # #9's head release 0.31.0 could not run (its probe's set-up raised): no snapshot, no
    # evidence. #11 claims to change none of #9's cases from 0.31.0: not confirmed by a run
    # that measured nothing; #9's claim reads could not run there, never holds or fails.
    kb, work = kb_and_work
    path = work / "matrix-9" / "matrix.json"
    runs = json.loads(path.read_text(encoding="utf-8"))
    why = "VllmConfig raised RuntimeError: refused (at vllm/platforms/cpu.py:9 in check)"
    runs["releases"][-1].update(evidence=None, snapshot=None, could_not_run=why)
    path.write_text(json.dumps(runs), encoding="utf-8")
    records = load_records(kb)
    data = history.history_data(records, history_sources.load_matrices(records, work))
    prs = {p["number"]: p for p in data["per_release"][-1]["prs"]}
    assert prs[11]["named_by"][0]["checked"].startswith("not checked: the matrix of #9")
    (row,) = [r for r in data["verdicts"] if r["record"] == 9]
    assert row["cells"][-1] == "could not run" and row["discrimination"] == "could not run"
    assert {"record": 9, "what": f"PR #9 vLLM 0.31.0 could not run: {why}"} in data["not_measured"]
    out = tmp_path / "history.md"
    args = ["history", "--kb", str(kb), "--work", str(work), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--fail-on", "error"])
    assert result.exit_code == 3, result.output
    assert f"fail-on: error: history: PR #9 vLLM 0.31.0 could not run: {why}" in result.output
    assert "| C1 | op_budget |  |  | holds | could not run | could not run |" in out.read_text(
        encoding="utf-8"
    )
    # The default (drift,error): #7's unexplained drift is a claim of its own: exit 1.
    assert CliRunner().invoke(main, args).exit_code == 1
