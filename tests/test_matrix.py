"""The release matrix without vLLM: release plan, before -> after, op-count trajectories, drift
attribution, CLI errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import published, release_cache
from gdn_review.common.release import Release, ReleaseError
from gdn_review.kb import load_record
from gdn_review.matrix import matrix, matrix_command, matrix_files, matrix_report, release_plan
from gdn_review.report import discrimination, report
from tests.conftest import (
    MATRIX_RECORD,
    ROOT,
    write_matrix_evidence,
    write_matrix_snapshot,
)


@pytest.fixture
def matrix_folder(tmp_path, write_record):
    kb = write_record(MATRIX_RECORD)
    runs = [
        ("0.28.0", "base", "failed", 2),
        ("0.29.0", "head", "passed", 1),
        ("0.30.0", "later", "passed", 1),
        ("0.31.0", "later", "passed", 1),
    ]
    spec = {"num_decodes": 0, "path": "spec"}
    plain = {"num_prefills": 0, "path": "non_spec"}
    snapshots_by_version = {
        "0.28.0": (spec, plain),
        "0.29.0": (spec, plain),
        "0.30.0": (
            spec,
            {**plain, "num_prefills": 1, "new_field": None},
        ),  # unexplained drift + a new field
        "0.31.0": (
            {**spec, "num_decodes": 2},
            {**plain, "num_prefills": 1, "new_field": None},
        ),  # explained by #9
    }
    return load_record(kb / "7.yaml"), _write_runs(tmp_path / "work", runs, snapshots_by_version)


def _write_runs(folder, runs: list[tuple], snapshots_by_version: dict):
    """A matrix run's folder: per release (version, role, outcome, aten.ge count) its evidence and
    its snapshot of the cases spec and plain."""
    folder.mkdir()
    entries = []
    for version, role, outcome, ge in runs:
        entries.append(
            {
                "version": version,
                "role": role,
                "source": "unpacked on PYTHONPATH",
                "claims_on_any_release": role == "base",
                "evidence": write_matrix_evidence(folder, version, outcome, ge),
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
                "record": 7,
                "releases": entries,
                "downloaded": [],
                "jobs": 2,
                "duration_s": 3.0,
                "target_diff": "--- a\n+++ b\n",
            }
        ),
        encoding="utf-8",
    )
    return folder


def test_default_releases_are_base_head_and_every_later_minor_up_to_the_newest_published():
    assert release_plan.default_releases("0.28.0", "0.29.0", "0.33.0") == [
        "0.28.0",
        "0.29.0",
        "0.30.0",
        "0.31.0",
        "0.32.0",
        "0.33.0",
    ]
    assert release_plan.default_releases("0.31.0", "0.32.0", "0.33.0") == [
        "0.31.0",
        "0.32.0",
        "0.33.0",
    ]
    assert release_plan.default_releases("0.31.0", "0.32.0", "0.33.1") == [
        "0.31.0",
        "0.32.0",
        "0.33.0",
        "0.33.1",
    ]
    with pytest.raises(matrix_files.MatrixError, match="base_release"):
        release_plan.default_releases(None, "0.29.0", "0.33.0")


def test_plan_names_roles_and_refuses_a_bad_release_number(write_record):
    record = load_record(write_record(MATRIX_RECORD) / "7.yaml")
    planned = release_plan.plan(record, "0.33.0", newest="0.33.0")
    assert [(p.version, p.role, p.installed) for p in planned][:2] == [
        ("0.28.0", "base", False),
        ("0.29.0", "head", False),
    ]
    assert planned[-1].installed and planned[-1].role == "later"
    with pytest.raises(matrix_files.MatrixError, match="not a release number"):
        release_plan.plan(record, "0.33.0", ["banana"])
    with pytest.raises(matrix_files.MatrixError, match="no release ends the default range"):
        release_plan.plan(record, "0.33.0")


def test_the_default_range_ends_at_the_newest_published_release_not_the_installed_one(
    monkeypatch, write_record
):
    record = load_record(write_record(MATRIX_RECORD) / "7.yaml")
    monkeypatch.setattr(
        published, "_index_versions", lambda timeout: ["0.35.0rc1", "0.34.0", "0.33.0"]
    )
    said = []
    newest = matrix_command.default_end(say=said.append)
    assert newest == "0.34.0"
    assert said == [
        "the default range ends at vLLM 0.34.0, the newest release the package index serves"
    ]
    planned = release_plan.plan(record, "0.33.0", newest=newest)
    assert [(p.version, p.installed) for p in planned][-2:] == [("0.33.0", True), ("0.34.0", False)]


def test_an_unreadable_index_or_offline_ends_the_default_range_at_the_newest_at_hand(monkeypatch):
    def unreadable(timeout):
        raise ReleaseError("the package index could not say which vLLM releases it serves")

    monkeypatch.setattr(published, "_index_versions", unreadable)
    monkeypatch.setattr(published, "newest_local", lambda: Release("0.33.0"))
    said = []
    assert matrix_command.default_end(say=said.append) == "0.33.0"
    assert "could not say" in said[0] and "stands in" in said[0]
    assert said[1] == "the default range ends at vLLM 0.33.0, the newest release at hand"
    said.clear()
    assert matrix_command.default_end(offline=True, say=said.append) == "0.33.0"
    assert said == ["the default range ends at vLLM 0.33.0, the newest release at hand"]


def test_a_warm_cache_downloads_nothing(monkeypatch, write_record, tmp_path):
    record = load_record(write_record(MATRIX_RECORD) / "7.yaml")
    fake = release_cache.Entry("0.28.0", tmp_path, "w.whl", "0")
    monkeypatch.setattr(release_cache, "cached", lambda version, root=None: fake)
    monkeypatch.setattr(release_cache, "ensure", lambda version, root=None, say=None: fake)
    trees = matrix.Trees(release_plan.plan(record, "0.29.0", ["0.28.0", "0.29.0"]), print)
    paths = {version: trees.path(version) for version in ("0.28.0", "0.29.0")}
    trees.close()
    assert trees.downloaded == [] and paths == {"0.28.0": tmp_path, "0.29.0": None}


def test_the_installed_release_does_not_wait_for_the_downloads(monkeypatch, write_record):
    """A release being fetched holds back its own sessions only; one that cannot be had fails
    the matrix (MatrixError, bad input) when its session asks for it."""
    import threading

    from gdn_review.common import release_trees

    record = load_record(write_record(MATRIX_RECORD) / "7.yaml")
    arrived = threading.Event()

    def tree(version, fetch=True, say=None):
        assert arrived.wait(30)
        raise ReleaseError(f"vLLM {version} is not a release on the package index")

    monkeypatch.setattr(release_cache, "cached", lambda version, root=None: None)
    monkeypatch.setattr(release_trees, "tree", tree)
    trees = matrix.Trees(release_plan.plan(record, "0.29.0", ["0.28.0", "0.29.0"]), print)
    try:
        assert trees.downloaded == ["0.28.0"]
        assert trees.path("0.29.0") is None  # the installed one, while 0.28.0 is still fetched
        arrived.set()
        with pytest.raises(matrix_files.MatrixError, match="not a release on the package index"):
            trees.path("0.28.0")
    finally:
        arrived.set()
        trees.close()


def test_before_fails_then_holds_discriminates_with_measured_values(matrix_folder):
    record, folder = matrix_folder
    data = matrix_report.matrix_data(record, matrix_files.load_matrix(folder), {7})
    (row,) = data["rows"]
    assert row["before"] == "fails" and row["discrimination"] == "discriminates"
    assert [c["verdict"] for c in row["cells"]] == ["fails", "holds", "holds", "holds"]
    assert row["cells"][0]["measure"] == "aten.ge 2"
    assert row["trajectories"] == ["aten.ge, most per build(): 2 (0.28.0) → 1 (0.29.0–0.31.0)"]


def test_a_head_release_that_did_not_run_is_stood_in_for_by_the_next_one(matrix_folder):
    # vLLM 0.24 to 0.27 pick no CPU platform here: a record whose head release is one of
    # them is judged on the first later release that ran, and the reason says so.
    record, folder = matrix_folder
    runs = matrix_files.load_matrix(folder)
    runs["releases"] = [entry for entry in runs["releases"] if entry["role"] != "head"]
    (row,) = matrix_report.matrix_data(record, runs, {7})["rows"]
    assert row["discrimination"] == "discriminates"
    assert (
        "head release 0.29.0 not run: 0.30.0, the first later release that ran, stands in"
        in row["discrimination_reason"]
    )


@pytest.mark.parametrize(
    "before, base, head, expected",
    [
        ("fails", "holds", "holds", "does not discriminate"),
        ("fails", "fails", "fails", "does not discriminate"),
        ("holds", "holds", "holds", "preserved"),
        ("holds", "holds", "known deviation", "preserved"),
        ("holds", "fails", "holds", "does not discriminate"),
        ("holds", "holds", "fails", "does not discriminate"),
        (None, "fails", "holds", "not stated"),
        ("fails", "unverified", "holds", "unverified"),
    ],
)
def test_discrimination_rules(before, base, head, expected):
    cell = lambda v: {"verdict": v, "reason": "r", "measure": ""}  # noqa: E731
    assert discrimination.discrimination(before, cell(base), cell(head))[0] == expected


def test_a_preservation_claim_that_holds_on_base_and_head_reads_preserved_not_a_failure(
    matrix_folder, tmp_path
):
    _, folder = matrix_folder
    (tmp_path / "kb" / "7.yaml").write_text(
        MATRIX_RECORD.replace("before: fails", "before: holds"), encoding="utf-8"
    )
    record = load_record(tmp_path / "kb" / "7.yaml")
    write_matrix_evidence(folder, "0.28.0", "passed", 1)  # the base release holds too
    data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})
    (row,) = data["matrix"]["rows"]
    assert (row["before"], row["discrimination"]) == ("holds", "preserved")
    assert (
        row["discrimination_reason"]
        == "holds on the base release and holds on the head release, as the "
        "record says (before: holds)"
    )
    assert (
        matrix_report.summary_lines(data)[0]
        == "C1: preserved: 0.28.0 holds (aten.ge 1), 0.29.0 holds (aten.ge "
        "1), 0.30.0 holds (aten.ge 1), 0.31.0 holds (aten.ge 1)"
    )
    text = report.render_markdown(data)
    assert "| C1 | holds | **holds**: aten.ge 1 |" in text and "| **preserved** |" in text
    assert "- **C1: preserved**: holds on the base release" in text
    assert "**does not discriminate** |" not in text and "does not discriminate**:" not in text


def test_drift_is_attributed_to_the_pr_that_shipped_between_or_shown_unexplained(matrix_folder):
    record, folder = matrix_folder
    drift = matrix_report.matrix_data(record, matrix_files.load_matrix(folder), {7})["drift"]
    rows = {(r["from"], r["to"], r["case"]): r for r in drift["rows"]}
    assert set(rows) == {("0.29.0", "0.30.0", "plain"), ("0.30.0", "0.31.0", "spec")}
    assert rows[("0.30.0", "0.31.0", "spec")]["explained_by"][0]["number"] == 9
    assert [r["case"] for r in drift["unexplained"]] == ["plain"]
    assert drift["unexplained"][0]["changes"] == ["num_prefills: 0 → 1"]
    assert drift["schema"] == [
        {"from": "0.29.0", "to": "0.30.0", "added": ["new_field"], "removed": []}
    ]


def test_matrix_report_renders_the_table_drift_and_diff_and_fails_on_drift(matrix_folder):
    record, folder = matrix_folder
    data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7, 9})
    text = report.render_markdown(data)
    assert "## Release matrix" in text and "**discriminates**" in text
    assert "| C1 | fails | **fails**: aten.ge 2 | **holds**: aten.ge 1 |" in text
    assert "**unexplained drift**" in text and "[#9](9.md) (changes-claim)" in text
    assert "<details><summary>The PR's diff of the target file (0.28.0 → 0.29.0)</summary>" in text
    found = matrix_report.findings([data])
    assert [what for condition, what in found if condition == "drift"] == [
        "PR #7 0.29.0 → 0.30.0: plain: num_prefills"
    ]
    assert not [what for condition, what in found if condition == "fails"]


def test_unknown_release_is_bad_input(monkeypatch):
    def unknown(version, root=None, say=None):
        raise release_cache.ReleaseError(
            f"vLLM {version} is not a release on the package index (pip: no matching distribution)"
        )

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(release_cache, "cached", lambda version, root=None: None)
    monkeypatch.setattr(release_cache, "ensure", unknown)
    result = CliRunner().invoke(main, ["matrix", "--record", "52078", "--vllm", "0.99.0"])
    assert result.exit_code == 2, result.output
    assert "vLLM 0.99.0 is not a release on the package index" in result.output
    result = CliRunner().invoke(main, ["matrix", "--record", "52078", "--vllm", "banana"])
    assert result.exit_code == 2 and "not a release number" in result.output


# --- Authoring (issue 47): releases that cannot run here, reasons, drafts of `changes:` ----------

OLD_RECORD = MATRIX_RECORD.replace("base_release: 0.28.0", "base_release: 0.23.0").replace(
    "head_release: 0.29.0", "head_release: 0.24.0"
)


def test_the_plan_leaves_out_releases_that_cannot_run_here_and_says_why(monkeypatch, write_record):
    record = load_record(write_record(OLD_RECORD) / "7.yaml")
    monkeypatch.setattr(release_plan, "nvidia_driver", lambda: False)
    planned = release_plan.plan(record, "0.29.0", newest="0.29.0")
    assert [(p.version, p.role) for p in planned] == [
        ("0.23.0", "base"),
        ("0.28.0", "later"),
        ("0.29.0", "later"),
    ]
    asked = release_plan.plan(record, "0.29.0", ["0.23.0", "0.25.0", "0.28.0"])
    assert [p.version for p in asked] == ["0.23.0", "0.28.0"]
    with pytest.raises(matrix_files.MatrixError, match='"Found no NVIDIA driver"'):
        release_plan.plan(record, "0.29.0", ["0.25.0", "0.26.0"])
    monkeypatch.setattr(release_plan, "nvidia_driver", lambda: True)  # a GPU machine runs them
    assert [p.version for p in release_plan.plan(record, "0.29.0", newest="0.29.0")][:3] == [
        "0.23.0",
        "0.24.0",
        "0.25.0",
    ]


def test_a_left_out_head_release_is_stood_in_for_and_the_reason_is_said_once(
    monkeypatch, tmp_path, write_record
):
    monkeypatch.setattr(release_plan, "nvidia_driver", lambda: False)
    record = load_record(write_record(OLD_RECORD) / "7.yaml")
    cases = ({"num_decodes": 0}, {"num_prefills": 0})
    runs = [("0.23.0", "base", "failed", 2), ("0.28.0", "later", "passed", 1)]
    folder = _write_runs(tmp_path / "work", runs, {"0.23.0": cases, "0.28.0": cases})
    data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})
    matrix = data["matrix"]
    assert list(matrix["left_out"]) == ["0.24.0", "0.25.0", "0.26.0", "0.27.0"]
    (row,) = matrix["rows"]
    assert row["discrimination"] == "discriminates"
    assert row["discrimination_reason"].endswith(
        "(head release 0.24.0 cannot run on this machine: 0.28.0, the first later release that "
        "ran, stands in)"
    )
    lines = matrix_report.summary_lines(data)
    said = [line for line in lines if line.startswith("left out:")]
    assert said == [
        f"left out: vLLM 0.24.0, 0.25.0, 0.26.0, 0.27.0: {release_plan.NO_CPU_PLATFORM_REASON}"
    ]


def test_a_not_applicable_cell_says_why(matrix_folder):
    record, folder = matrix_folder
    evidence = folder / "evidence-0.29.0.json"
    data = json.loads(evidence.read_text(encoding="utf-8"))
    data["tests"][0].update(
        outcome="skipped", reason="not applicable: claim C1 covers vLLM >=0.30; loaded 0.29.0"
    )
    evidence.write_text(json.dumps(data), encoding="utf-8")
    report_data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})
    cell = report_data["matrix"]["rows"][0]["cells"][1]
    assert (cell["verdict"], cell["measure"]) == (
        "not applicable",
        "claim C1 covers vLLM >=0.30; loaded 0.29.0",
    )
    assert (
        "0.29.0 not applicable (claim C1 covers vLLM >=0.30; loaded 0.29.0)"
        in (matrix_report.summary_lines(report_data)[0])
    )
    text = report.render_markdown(report_data)
    assert "**not applicable**: claim C1 covers vLLM >=0.30; loaded 0.29.0 |" in text


def test_a_case_that_became_applicable_is_said_so_not_as_its_fields(matrix_folder):
    record, folder = matrix_folder
    missing = {"not_applicable": "not applicable: vLLM has no prefill_query_start_loc"}
    spec = {"num_decodes": 0, "path": "spec"}
    write_matrix_snapshot(folder, "0.28.0", spec, missing)
    write_matrix_snapshot(folder, "0.29.0", spec, missing)
    data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7, 9})
    drift = data["matrix"]["drift"]
    assert drift["applicability"] == [
        {
            "from": "0.29.0",
            "to": "0.30.0",
            "case": "plain",
            "became": "applicable",
            "reason": missing["not_applicable"],
        }
    ]
    assert drift["schema"] == [] and drift["unexplained"] == []
    assert (
        "    0.29.0 → 0.30.0: case plain became applicable (not applicable before: vLLM has no "
        "prefill_query_start_loc)" in matrix_report.summary_lines(data)
    )


def _merged(record_text: str, draft: str) -> str:
    """The record with the draft's keys merged in, as a person would paste it."""
    import yaml

    record, added = yaml.safe_load(record_text), yaml.safe_load(draft)
    for key, value in added.items():
        if isinstance(value, list):
            record.setdefault(key, []).extend(value)
        else:
            for inner, items in value.items():
                record[key].setdefault(inner, []).extend(items)
    return yaml.safe_dump(record, sort_keys=False)


@pytest.mark.parametrize(
    "note, drafted",
    [
        (None, "number: TODO"),
        (
            "- release: 0.30.0\n  what: counts prefills anew\n"
            "  pr: {number: 11, title: Count prefills, evidence: high, why: the hunk}\n",
            "number: 11",
        ),
        (
            "- id: prefill-count\n  release: 0.30.0\n  what: counts prefills anew\n"
            "  searched: [prefill count]\n",
            "change: prefill-count",
        ),
    ],
    ids=["no-known-pr", "changes.yaml-pr", "changes.yaml-untied"],
)
def test_draft_changes_prints_the_yaml_that_explains_the_unexplained_drift(
    matrix_folder, tmp_path, note, drafted
):
    from gdn_review.kb.changes import load_changes
    from gdn_review.matrix.drift import draft_changes, drafts, drift_data

    record, folder = matrix_folder
    kb = tmp_path / "kb"
    if note:
        (kb / "history").mkdir()
        (kb / "history" / "changes.yaml").write_text(
            "schema_version: 1\nchanges:\n" + note, encoding="utf-8"
        )
    before = sorted(p.name for p in folder.iterdir())
    (text,) = drafts(kb, [7], folder)
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    assert "#   0.29.0 → 0.30.0: plain: num_prefills: 0 → 1" in text
    assert drafted in text and "cases: [plain]" in text and "fields: [num_prefills]" in text
    if note is None:
        return  # a PR still to find: validate refuses the draft until it is named
    (kb / "7.yaml").write_text(_merged((kb / "7.yaml").read_text(), text), encoding="utf-8")
    merged = load_record(kb / "7.yaml")
    snapshots = [
        (e["version"], e["snapshot_data"]) for e in matrix_files.load_matrix(folder)["releases"]
    ]
    assert drift_data(merged, snapshots, {7})["unexplained"] == []
    assert draft_changes(merged, drift_data(merged, snapshots, {7}), [], load_changes(kb)) == ""


def test_draft_changes_of_the_records_own_step_goes_under_target(matrix_folder):
    from gdn_review.matrix.drift import draft_changes, drift_data

    record, folder = matrix_folder
    snapshots = [
        (e["version"], e["snapshot_data"]) for e in matrix_files.load_matrix(folder)["releases"]
    ]
    moved = [(v, s) for v, s in snapshots if v in ("0.28.0", "0.30.0")]  # 0.29.0 (head) between
    text = draft_changes(record, drift_data(record, moved, {7}))
    assert "\ntarget:\n  changes:\n  - cases: [plain]\n    fields: [num_prefills]\n" in text


def test_matrix_draft_changes_on_the_command_line_runs_nothing(matrix_folder, tmp_path):
    _, folder = matrix_folder
    args = ["matrix", "--kb", str(tmp_path / "kb"), "--record", "7", "--work", str(folder)]
    result = CliRunner().invoke(main, [*args, "--draft-changes"])
    assert result.exit_code == 0, result.output
    assert "related:\n- number: TODO" in result.output and "from_release: 0.30.0" in result.output


def test_a_claim_whose_tests_could_not_run_reads_so_in_its_cell_never_fails(matrix_folder):
    # Format 1's "error" (set-up raised) is read as could not run: the base release's test of C1
    # measured nothing, so C1 neither fails there nor discriminates, and --fail-on error names it.
    record, folder = matrix_folder
    evidence = folder / "evidence-0.28.0.json"
    data = json.loads(evidence.read_text(encoding="utf-8"))
    data["tests"][0].update(outcome="error", reason="VllmConfig raised RuntimeError: refused")
    evidence.write_text(json.dumps(data), encoding="utf-8")
    report_data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})
    (row,) = report_data["matrix"]["rows"]
    assert [c["verdict"] for c in row["cells"]] == ["could not run", "holds", "holds", "holds"]
    assert row["cells"][0]["measure"] == ""  # nothing measured: no op count read from it
    assert row["discrimination"] == "could not run"
    assert "VllmConfig raised RuntimeError: refused" in row["discrimination_reason"]
    lines = matrix_report.summary_lines(report_data)
    assert lines[0].startswith("C1: could not run: 0.28.0 could not run, 0.29.0 holds"), lines
    found = matrix_report.findings([report_data])
    assert ("fails", "PR #7 claim C1") not in found
    assert any(
        condition == "error" and what.startswith("PR #7 claim C1 could not run on vLLM 0.28.0")
        for condition, what in found
    ), found
    text = report.render_markdown(report_data)
    assert "Fix the code, or record the deviation" not in text
    assert "| C1 | fails | **could not run** | **holds**: aten.ge 1 |" in text, text


def test_a_release_that_could_not_run_is_a_column_of_its_own_and_an_error(matrix_folder):
    # What the matrix writes for a release whose probe could not run: no evidence, no snapshot.
    record, folder = matrix_folder
    runs = json.loads((folder / "matrix.json").read_text(encoding="utf-8"))
    why = "VllmConfig raised RuntimeError: refused (at vllm/platforms/cpu.py:9 in check)"
    runs["releases"][-1].update(
        evidence=None, snapshot=None, could_not_run=why, summary=f"could not run: {why}"
    )
    (folder / "matrix.json").write_text(json.dumps(runs), encoding="utf-8")
    report_data = matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})
    matrix_part = report_data["matrix"]
    assert [c["version"] for c in matrix_part["columns"]][-1] == "0.31.0"
    assert matrix_part["could_not_run"] == {"0.31.0": why}
    (row,) = matrix_part["rows"]
    assert row["cells"][-1]["verdict"] == "could not run" and row["discrimination"] == (
        "discriminates"  # measured on 0.28.0 and 0.29.0: 0.31.0 takes no part in it
    )
    assert matrix_part["drift"]["missing"] == ["0.31.0"]
    assert all(r["to"] != "0.31.0" for r in matrix_part["drift"]["rows"])  # no drift read
    lines = matrix_report.summary_lines(report_data)
    assert lines[0].endswith("0.31.0 could not run"), lines
    assert [line for line in lines if "0.31.0" in line and "could not run:" in line] == [
        f"could not run: vLLM 0.31.0: {why}; none of its tests ran (fix the set-up or the "
        "release's platform; no claim is judged there)"
    ]
    found = matrix_report.findings([report_data])
    assert ("error", f"PR #7 vLLM 0.31.0 could not run: {why}") in found
    tripped = [f for f in found if f[0] in {"drift", "error"}]
    assert {f[0] for f in tripped} == {"drift", "error"}  # 0.29.0 → 0.30.0's drift is still said


def test_matrix_and_history_fail_on_error_by_default():
    from gdn_review.cli.matrix_commands import history_command, matrix_command

    for command in (matrix_command, history_command):
        option = next(p for p in command.params if p.name == "fail_on")
        assert option.default == "drift,error"


def test_a_matrix_where_no_release_could_run_has_no_report_and_says_why(matrix_folder):
    record, folder = matrix_folder
    runs = json.loads((folder / "matrix.json").read_text(encoding="utf-8"))
    for entry in runs["releases"]:
        entry.update(evidence=None, snapshot=None, could_not_run="VllmConfig raised E: no")
    (folder / "matrix.json").write_text(json.dumps(runs), encoding="utf-8")
    with pytest.raises(matrix_report.NothingRan, match="no release ran: vLLM 0.28.0 could not"):
        matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7})


def test_each_release_s_adaptations_are_named_in_the_matrix_report(matrix_folder):
    # An API adaptation of the base release (harness/adaptations.py): its evidence names it,
    # and so does the matrix report, release by release (issue 53, item 2).
    record, folder = matrix_folder
    path = folder / "evidence-0.28.0.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["environment"]["adaptations"] = [
        {
            "name": "prefix_caching_unresolved",
            "releases": "before 0.32.0",
            "what": "no hash_block_size set",
            "reason": "the release has no such field",
            "first_release": None,
        }
    ]
    path.write_text(json.dumps(data), encoding="utf-8")
    text = report.render_markdown(
        matrix_report.matrix_report(record, matrix_files.load_matrix(folder), {7, 9})
    )
    assert (
        "- vLLM 0.28.0: prefix_caching_unresolved (before 0.32.0): no hash_block_size set; "
        "sound because the release has no such field"
    ) in text
    assert "vLLM 0.29.0: " not in text  # a release set up as it is names nothing
