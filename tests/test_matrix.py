"""The release matrix without vLLM: release plan, before -> after, op-count trajectories, drift
attribution, CLI errors."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import release_cache
from gdn_review.kb import load_record
from gdn_review.matrix import matrix, matrix_files, matrix_report, release_plan
from gdn_review.report import report, verdicts
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
    folder = tmp_path / "work"
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
    return load_record(kb / "7.yaml"), folder


def test_default_releases_are_base_head_and_every_later_minor_up_to_the_installed_one():
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
    planned = release_plan.plan(record, "0.33.0")
    assert [(p.version, p.role, p.installed) for p in planned][:2] == [
        ("0.28.0", "base", False),
        ("0.29.0", "head", False),
    ]
    assert planned[-1].installed and planned[-1].role == "later"
    with pytest.raises(matrix_files.MatrixError, match="not a release number"):
        release_plan.plan(record, "0.33.0", ["banana"])


def test_a_warm_cache_downloads_nothing(monkeypatch, write_record, tmp_path):
    record = load_record(write_record(MATRIX_RECORD) / "7.yaml")
    fake = release_cache.Release("0.28.0", tmp_path, "w.whl", "0")
    monkeypatch.setattr(release_cache, "cached", lambda version, root=None: fake)
    monkeypatch.setattr(release_cache, "ensure", lambda version, root=None, say=None: fake)
    paths, downloaded = matrix.fetch(
        release_plan.plan(record, "0.29.0", ["0.28.0", "0.29.0"]), print
    )
    assert downloaded == [] and paths == {"0.28.0": tmp_path, "0.29.0": None}


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
    assert verdicts.discrimination(before, cell(base), cell(head))[0] == expected


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
    assert matrix_report.tripped({"drift"}, [data]) == [
        "PR 7 unexplained drift 0.29.0 → 0.30.0: plain: num_prefills"
    ]
    assert matrix_report.tripped({"fails"}, [data]) == []


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
