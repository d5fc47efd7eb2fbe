"""Evidence names the version of each record it measured (the sha256 of its file); reports say which
parts are stale.

The friction this answers: after a record's mutants were edited, `gdn-review
run` kept showing the old `mutate` results with no word that the record had
changed since they were measured.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import types

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.kb import load_record
from gdn_review.report import report
from gdn_review.run import evidence_file, plugin
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kb_and_evidence(tmp_path, hashed: bool = True):
    """A copy of the golden record and its mutation evidence, each part stamped with the record's
    hash as it is now."""
    kb = tmp_path / "kb"
    kb.mkdir()
    record = kb / "1.yaml"
    shutil.copy(GOLDEN / "kb" / "1.yaml", record)
    data = json.loads((GOLDEN / "evidence" / "mutation.json").read_text(encoding="utf-8"))
    if hashed:
        digest = _sha(record)
        data["record_sha256"] = {"1": digest}
        data["mutation"]["records"]["1"]["record_sha256"] = digest
        data["bench"] = {
            "1": {
                "base": "0.28.0",
                "head": "0.29.0",
                "device": "cpu",
                "verdict": "supported",
                "record_sha256": digest,
                "pooled": {"ratio": 0.9, "ci95": [0.85, 0.95]},
                "cases": [],
            }
        }
    evidence = tmp_path / "evidence.json"
    evidence.write_text(json.dumps(data), encoding="utf-8")
    return record, evidence


def _report(record, evidence) -> dict:
    return report.report_data(load_record(record), evidence_file.load([evidence]), path=record)


def _edit(record) -> None:
    with record.open("a", encoding="utf-8") as stream:
        stream.write("# a reviewer edited the record after the runs\n")


def test_an_edited_record_makes_every_part_measured_before_the_edit_stale(tmp_path):
    record, evidence = _kb_and_evidence(tmp_path)
    _edit(record)
    data = _report(record, evidence)
    assert data["stale"] == [
        f"stale: the tests of PR #1 ran on an earlier version of {record} "
        "(edited since); run `gdn-review run --record 1`",
        "stale: the mutation results of PR #1 were measured on an "
        f"earlier version of {record} (edited since); run `gdn-review "
        "mutate --record 1`",
        "stale: the bench (cpu) of PR #1 was measured on an earlier "
        f"version of {record} (edited since); run `gdn-review bench "
        "--record 1`",
    ]
    assert data["next_steps"][1] == (
        "Stale: the mutation results of PR #1 were measured on an "
        f"earlier version of {record} (edited since); "
        "run `gdn-review mutate --record 1`."
    )
    mutants = next(part for part in data["parts"] if part.startswith("mutants:"))
    assert mutants.endswith("stale: measured on an earlier version of the record")
    markdown = report.render_markdown(data)
    assert "Stale: the mutation results of PR #1 were measured on an earlier version" in markdown


def test_only_the_part_measured_before_the_edit_is_stale(tmp_path):
    # `run` after the edit: its tests saw the record as it is now; the mutants kept from before did
    # not.
    record, evidence = _kb_and_evidence(tmp_path)
    _edit(record)
    data = json.loads(evidence.read_text(encoding="utf-8"))
    data["record_sha256"] = {"1": _sha(record)}
    data["bench"]["1"]["record_sha256"] = _sha(record)
    evidence.write_text(json.dumps(data), encoding="utf-8")
    stale = _report(record, evidence)["stale"]
    assert (
        len(stale) == 1
        and stale[0].startswith("stale: the mutation results of PR #1")
        and "gdn-review mutate --record 1" in stale[0]
    )


def test_an_unchanged_record_has_no_stale_note(tmp_path):
    record, evidence = _kb_and_evidence(tmp_path)
    data = _report(record, evidence)
    assert "stale" not in data
    assert not any("stale" in line.lower() for line in data["next_steps"] + data["parts"])


def test_evidence_without_hashes_still_loads_and_is_never_called_stale(tmp_path):
    record, evidence = _kb_and_evidence(tmp_path, hashed=False)
    _edit(record)
    data = _report(record, evidence)
    assert "stale" not in data and data["mutation"]["total"] > 0


def test_report_command_names_the_stale_part(tmp_path):
    record, evidence = _kb_and_evidence(tmp_path)
    _edit(record)
    done = CliRunner().invoke(
        main,
        [
            "report",
            "--kb",
            str(record.parent),
            "--evidence",
            str(evidence),
            "--out",
            str(tmp_path / "reports"),
        ],
    )
    assert done.exit_code in (0, 1), done.output
    assert (
        "  stale: the mutation results of PR #1 were measured on an "
        f"earlier version of {record} (edited since)" in done.output
    )
    assert "Stale: the mutation results of PR #1" in (tmp_path / "reports" / "1.md").read_text(
        encoding="utf-8"
    )


def test_the_plugin_finds_the_record_a_generated_module_came_from(tmp_path):
    (tmp_path / "kb").mkdir()
    (tmp_path / "generated").mkdir()
    (tmp_path / "kb" / "7.yaml").write_text("schema_version: 1\n", encoding="utf-8")
    module = types.SimpleNamespace(
        SOURCE="kb/7.yaml",
        SNAPSHOTS="../kb/snapshots/7",
        __file__=str(tmp_path / "generated" / "test_pr_7.py"),
    )
    assert plugin._record_file(module, tmp_path / "elsewhere") == tmp_path / "kb" / "7.yaml"
    assert (
        plugin._record_file(types.SimpleNamespace(SOURCE="kb/7.yaml"), tmp_path)
        == tmp_path / "kb" / "7.yaml"
    )
    assert plugin._record_file(types.SimpleNamespace(SOURCE="kb/8.yaml"), tmp_path) is None


def test_mutation_results_keep_the_hash_of_the_record_their_baseline_ran(tmp_path):
    from gdn_review import mutation
    from gdn_review.mutation.catalogue import Catalogue

    evidence = tmp_path / "evidence.json"
    evidence.write_text(
        json.dumps(
            {"format": "gdn-review-evidence/1", "tests": [], "record_sha256": {"7": "a" * 64}}
        ),
        encoding="utf-8",
    )
    mutation.write_evidence(
        evidence,
        [Catalogue(7, "0.33.0", TARGET, [], [], [])],
        [],
        {"finished_at": "2026-01-01T00:00:00Z"},
    )
    assert (
        json.loads(evidence.read_text(encoding="utf-8"))["mutation"]["records"]["7"][
            "record_sha256"
        ]
        == "a" * 64
    )


def test_a_malformed_hash_is_bad_evidence(tmp_path):
    _, evidence = _kb_and_evidence(tmp_path)
    data = json.loads(evidence.read_text(encoding="utf-8"))
    data["mutation"]["records"]["1"]["record_sha256"] = "not a hash"
    evidence.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(evidence_file.EvidenceError, match="record_sha256"):
        evidence_file.load([evidence])
