"""The release matrix end to end on real releases (slow: vLLM in a fresh interpreter per
release)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_c1_fails_without_the_pr_and_holds_with_it(tmp_path):
    """Two releases, one claim: on 0.28.0 (claims run whatever their range) aten.ge is 2, on 0.29.0
    it is 1."""
    work, reports = tmp_path / "work", tmp_path / "reports"
    command = [
        sys.executable,
        "-m",
        "gdn_review.cli",
        "matrix",
        "--record",
        "52078",
        "--vllm",
        "0.28.0",
        "--vllm",
        "0.29.0",
        "-k",
        "C1",
        "--jobs",
        "2",
        "--work",
        str(work),
        "--reports",
        str(reports),
        "--fail-on",
        "drift",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "C1: discriminates: 0.28.0 fails (aten.ge 1–2), 0.29.0 holds (aten.ge 1)" in done.stdout
    matrix = json.loads((work / "matrix.json").read_text())
    assert [r["version"] for r in matrix["releases"]] == ["0.28.0", "0.29.0"]
    assert (
        matrix["releases"][0]["claims_on_any_release"]
        and not matrix["releases"][1]["claims_on_any_release"]
    )
    evidence = json.loads((work / "evidence-0.28.0.json").read_text())
    assert evidence["environment"]["claim_ranges_ignored"] is True
    assert evidence["environment"]["vllm_source"].startswith("unpacked on PYTHONPATH")
    text = (reports / "52078.md").read_text()
    assert "aten.ge, most per build(): 2 (0.28.0) → 1 (0.29.0)" in text
    # The PR is a refactor: no field of any case changes from 0.28.0 to 0.29.0.
    assert "No field of any case changed value between consecutive releases." in text
    assert "Unexplained drift: none." in text
