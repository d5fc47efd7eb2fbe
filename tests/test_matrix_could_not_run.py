"""A release whose set-up raises reads "could not run" in the matrix, never a verdict (issue 54).

The real case: vLLM 0.34.0's CPU platform refuses this x86 machine without Triton's CPU
backend when the harness makes its ``VllmConfig``. The matrix probes each release once
before its tests; 0.34.0 then reads so in one line and one column, with vLLM's message, its
tests do not run, no drift is read from it, and the default ``--fail-on`` exits 3 (no claim
broke). 0.34.0 is the installed release; 0.33.0 comes from the release cache.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from gdn_review.cli.main import main
from gdn_review.matrix import drift
from gdn_review.run import snapshot_take


@pytest.mark.slow
def test_a_release_whose_platform_refuses_this_machine_reads_could_not_run(
    write_record, tmp_path, monkeypatch
):
    from tests.conftest import MINIMAL

    # Issue 53 adapts the harness to 0.34.0's platform; with it off the release refuses.
    monkeypatch.setenv("GDN_REVIEW_NO_RELEASE_ADAPTATIONS", "1")
    kb = write_record(MINIMAL)
    work, reports = tmp_path / "work", tmp_path / "reports"
    result = CliRunner().invoke(
        main,
        [
            "matrix",
            "--record",
            "7",
            "--kb",
            str(kb),
            "--vllm",
            "0.33.0",
            "--vllm",
            "0.34.0",
            "--jobs",
            "2",
            "--generated",
            str(tmp_path / "generated"),
            "--write",
            "--work",
            str(work),
            "--reports",
            str(reports),
        ],
    )
    output = result.output
    # Only the release that could not run tripped the default --fail-on (drift,error): 3, not 1.
    assert result.exit_code == 3, output
    said = [line for line in output.splitlines() if line.startswith("could not run: vLLM 0.34.0")]
    assert len(said) == 1 and "triton-cpu" in said[0] and "VllmConfig" in said[0], output
    assert re.search(r"\(at vllm/\S+:\d+ in \w+\)", said[0]), said  # where vLLM raised it
    assert "fail-on: error: PR #7 vLLM 0.34.0 could not run:" in output, output
    claim = next(line for line in output.splitlines() if line.startswith("C1: "))
    assert "0.33.0 holds" in claim and claim.endswith("0.34.0 could not run"), claim
    assert not re.search(r"0\.34\.0 (fails|holds|pending)", output), output
    assert "drift: 0 changed case(s) between releases, 0 unexplained" in output, output
    assert "no snapshot from vLLM 0.34.0: not compared" in output, output

    # matrix.json: none of 0.34.0's tests ran, nothing measured is kept of it.
    releases = json.loads((work / "matrix.json").read_text(encoding="utf-8"))["releases"]
    entry = {e["version"]: e for e in releases}["0.34.0"]
    assert "triton-cpu" in entry["could_not_run"] and entry["summary"].startswith("could not run")
    assert entry["evidence"] is None and entry["snapshot"] is None, entry
    assert not (work / "evidence-0.34.0.json").exists()
    assert {e["version"]: e for e in releases}["0.33.0"]["snapshot"] == "snapshot-0.33.0.json"

    # The report: one column for 0.34.0, each of its cells "could not run" with the message.
    text = (reports / "7.md").read_text(encoding="utf-8")
    # 0.34.0 is the installed release (no suffix), 0.33.0 comes from the release cache.
    assert "| 0.33.0 (later, unpacked) | 0.34.0 (later) |" in text
    (row,) = [line for line in text.splitlines() if line.startswith("| C1 | — | **holds**")]
    assert "**could not run**: VllmConfig raised RuntimeError" in row and "triton-cpu" in row
    assert "**fails**" not in row and "**pending**" not in row, row
    assert "No snapshot from: 0.34.0" in text
    assert "- vLLM 0.34.0 could not run: VllmConfig raised RuntimeError" in text
    assert "Fix the code, or record the deviation" not in text


@pytest.mark.slow
def test_a_snapshot_on_a_release_that_refuses_stores_each_case_as_not_taken(
    write_record, monkeypatch
):
    """``gdn-review snapshot``'s child on 0.34.0: each case could not run (before issue 54 it was
    ``raised: "RuntimeError: ..."``, then a crash of the child), and nothing is stored."""
    monkeypatch.setenv("GDN_REVIEW_NO_RELEASE_ADAPTATIONS", "1")
    from tests.conftest import MINIMAL

    kb = write_record(MINIMAL)
    data = snapshot_take.take_release(kb / "7.yaml", "0.34.0", say=lambda line: None)
    assert data["release"] == "0.34.0" and list(data["cases"]) == ["spec"]
    outcome, why = snapshot_take.not_taken(data["cases"]["spec"])
    assert outcome == "could not run" and "triton-cpu" in why and "VllmConfig" in why, why
    with pytest.raises(snapshot_take.SnapshotError, match="case 'spec' could not run"):
        snapshot_take.refuse_not_taken(data, "vLLM 0.34.0")


def test_drift_skips_a_case_whose_snapshot_could_not_run_and_says_so(write_record):
    """A case stored as not taken (its set-up raised, as snapshot_take stores it) moves no field:
    before issue 54 it was ``raised: "RuntimeError: ..."`` and read as drift."""
    from gdn_review.run.selection import load_records
    from tests.conftest import MINIMAL

    record = next(iter(load_records(write_record(MINIMAL)).values()))
    measured = {"num_decodes": 2, "num_prefills": 0}
    refused = "VllmConfig raised RuntimeError: no platform (at vllm/platforms/cpu.py:1 in f)"

    def taken(version, spec):
        return {"release": version, "device": "cpu", "cases": {"spec": spec}}

    found = drift.drift_data(
        record,
        [
            ("0.32.0", taken("0.32.0", measured)),
            ("0.33.0", taken("0.33.0", {"could_not_run": refused})),
            ("0.34.0", taken("0.34.0", measured)),
        ],
        set(),
    )
    assert found["rows"] == [] and found["unexplained"] == []
    assert [(r["from"], r["to"], r["case"]) for r in found["not_compared"]] == [
        ("0.32.0", "0.33.0", "spec"),
        ("0.33.0", "0.34.0", "spec"),
    ]
    assert found["not_compared"][0]["reason"] == f"could not run after: {refused}"
    assert snapshot_take.no_metadata({"could_not_run": refused}) == f"could not run: {refused}"
    with pytest.raises(snapshot_take.SnapshotError, match="'spec' could not run: VllmConfig"):
        snapshot_take.refuse_not_taken(taken("0.33.0", {"could_not_run": refused}), "vLLM 0.33.0")


@pytest.mark.slow
def test_run_on_a_release_whose_platform_refuses_writes_every_claim_could_not_run(
    write_record, tmp_path, monkeypatch
):
    """``run`` on the same refusing release: the session's warm-up follows the origin rule (a
    refusal before any test is each test's "could not run", not pytest's internal error), so the
    report is written, every claim "could not run" with vLLM's message, and the exit code is 3."""
    from tests.conftest import MINIMAL

    monkeypatch.setenv("GDN_REVIEW_NO_RELEASE_ADAPTATIONS", "1")
    kb = write_record(MINIMAL)
    reports = tmp_path / "reports"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--record",
            "7",
            "--kb",
            str(kb),
            "--generated",
            str(tmp_path / "generated"),
            "--write",
            "--evidence",
            str(tmp_path / "evidence.json"),
            "--reports",
            str(reports),
        ],
    )
    assert result.exit_code == 3, result.output
    assert "INTERNALERROR" not in result.output, result.output
    text = (reports / "7.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if re.match(r"\| C\d+ \|", line)]
    assert rows and all("could not run" in row for row in rows), rows
    assert "triton-cpu" in text, text
