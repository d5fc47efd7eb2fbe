"""review's outcomes: a change that makes build() raise breaks a claim; a set-up that could not
run is no verdict (issue 54).

The two reviews are real: the installed vLLM, a KB of #52078 alone (a copy of its record,
snapshots and generated module: a review reads and checks every record of its KB first), C1
alone (its op counts: a second of tests a side), no mutants. The set-up that could not run is an
environment a user can have: ``VLLM_CPU_KVCACHE_SPACE`` set to a word, which vLLM's CPU
platform reads with ``int()`` while the harness makes its ``VllmConfig`` (before the builder
under test is entered), in the review's worker and every child it forks. The render tests
read a review's data as the worker's JSON carries it.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
from pathlib import Path

import pytest

from gdn_review.cli.support import exit_for
from gdn_review.common.release import loaded as loaded_release
from gdn_review.report import guard_report
from gdn_review.review import render
from tests.test_review import TARGET, gdn, kb_options

# A release's adaptation to this machine (issue 53) must not make the set-up run.
NO_ADAPTATIONS = {"GDN_REVIEW_NO_RELEASE_ADAPTATIONS": "1"}


def _build_starting_with(statement: str) -> str:
    """A diff of the installed builder file: ``statement`` before build()'s first statement."""
    _, root = loaded_release()
    source = (root / TARGET).read_text(encoding="utf-8")
    (cls,) = [
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.ClassDef) and n.name == "GDNAttentionMetadataBuilder"
    ]
    (build,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "build"]
    docstring = isinstance(build.body[0], ast.Expr) and isinstance(
        build.body[0].value, ast.Constant
    )
    first = build.body[1] if docstring else build.body[0]
    lines = source.splitlines(True)
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    return "".join(
        difflib.unified_diff(source.splitlines(True), lines, f"a/{TARGET}", f"b/{TARGET}")
    )


def _review(tmp_path: Path, diff_text: str, env: dict | None = None):
    diff = tmp_path / "change.diff"
    diff.write_text(diff_text, encoding="utf-8")
    done = gdn(
        "review",
        str(diff),
        "--record",
        "52078",
        "-k",
        "C1",
        "--max-mutants",
        "0",
        "--out",
        str(tmp_path / "out"),
        "--work",
        str(tmp_path / "work"),
        *kb_options((52078,), tmp_path / "kb"),
        timeout=900,
        env=None if env is None else {**os.environ, **env},
    )
    out = tmp_path / "out"
    data = json.loads((out / "change.json").read_text(encoding="utf-8")) if out.exists() else {}
    markdown = (out / "change.md").read_text(encoding="utf-8") if out.exists() else ""
    return done, data, markdown


@pytest.mark.slow
def test_a_change_whose_build_raises_breaks_the_claim(tmp_path):
    done, data, markdown = _review(
        tmp_path, _build_starting_with("raise RuntimeError('the change broke build()')")
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fail-on: breaks: #52078 C1: holds → fails" in done.stderr
    assert "fail-on: error" not in done.stderr
    (c1,) = [c for c in data["records"][0]["claims"] if c["id"] == "C1"]
    assert (c1["before"], c1["after"], c1["broke"], c1["unmeasured"]) == (
        "holds",
        "fails",
        True,
        False,
    )
    assert c1["failing_after"] and not c1["unmeasured_after"]
    assert "RuntimeError: the change broke build()" in c1["failing_after"][0]["reason"]
    # The evidence says who raised it: the builder under test, behaviour, not the set-up.
    patched = json.loads((tmp_path / "work" / "both" / "evidence-patched.json").read_text())
    failed = [t for t in patched["tests"] if t["outcome"] == "failed"]
    assert failed and {t["failure"] for t in failed} == {
        "raised by GDNAttentionMetadataBuilder.build"
    }
    assert "**1 claim(s) break**" in markdown and "could not run" not in markdown


@pytest.mark.slow
def test_a_set_up_that_could_not_run_is_no_break_and_no_drift_exit_3(tmp_path):
    """The same change read where VllmConfig raises on both sides: no verdict, no drift."""
    done, data, markdown = _review(
        tmp_path,
        _build_starting_with("raise RuntimeError('the change broke build()')"),
        env={**NO_ADAPTATIONS, "VLLM_CPU_KVCACHE_SPACE": "lots"},
    )
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    tripped = [line for line in done.stderr.splitlines() if line.startswith("fail-on: ")]
    assert tripped and all(line.startswith("fail-on: error: ") for line in tripped), tripped
    record = data["records"][0]
    (c1,) = [c for c in record["claims"] if c["id"] == "C1"]
    assert (c1["before"], c1["after"], c1["broke"]) == ("could not run", "could not run", False)
    assert not c1["failing_after"] and c1["unmeasured_after"]
    assert "VllmConfig raised" in c1["unmeasured_after"][0]["reason"]
    # No field value from a case whose side could not build: no drift.
    assert record["moved"] == [] and record["unexplained"] == []
    assert record["not_built"] and all(
        "could not run" in why for why in record["not_built"].values()
    )
    assert "**1 claim(s) could not run** (no verdict)" in markdown
    assert "C1 **could not run** with the change" in markdown
    assert "claim(s) break" not in markdown and "fails" not in markdown
    assert "| change |" not in markdown and "**unexplained**" not in markdown


def _claim(before: str, after: str, broke: bool = False, reason: str = "") -> dict:
    return {
        "id": "C1",
        "text": "t",
        "check": "op_count",
        "expected": "",
        "before": before,
        "after": after,
        "measured_before": "",
        "measured_after": "",
        "reason_before": "",
        "reason_after": reason,
        "failing_after": [],
        "unmeasured_after": [],
        "unmeasured": "could not run" in (before, after) or "error in the check" in (before, after),
        "changed": before != after,
        "broke": broke,
    }


def _data(claims: list[dict], mutants: list[dict] = ()) -> dict:
    record = {
        "key": 1,
        "title": "a record",
        "claims": claims,
        "moved": [],
        "expect_after": {},
        "unexplained": [],
        "fields_added_or_removed": [],
        "applicability": [],
        "not_built": {},
        "deviations_appeared": [],
        "deviations_vanished": [],
        "carries_pr": False,
        "own": False,
        "sides": {"unpatched": "ran", "patched": "ran"},
    }
    return {
        "name": "x",
        "source": "vLLM 0.33.0",
        "onto": "0.33.0",
        "lands_in": "0.34.0",
        "files": [],
        "impact": [],
        "carried": [],
        "records": [record],
        "mutants": list(mutants),
        "mutants_left_out": 0,
    }


def test_an_error_in_the_check_is_an_error_finding_never_a_break():
    why = "error in the check (gdn-review's own code raised KeyError: 'returned' at x.py:1 in f)"
    data = _data([_claim("holds", "error in the check", reason=why)])
    found = render.findings(data)
    assert found == [("error", f"#1 C1 error in the check with the change: {why}")]
    assert exit_for(found, {"breaks", "drift", "error"}) == 3
    assert exit_for(found, {"breaks", "drift"}) == 0
    assert "**1 claim(s) had an error in the check** (no verdict)" in render.headline(data)
    text = render.markdown(data)
    assert "C1 **error in the check** with the change" in text and "a gdn-review bug" in text
    assert "claim(s) break" not in text


def test_a_break_beside_an_error_exits_1():
    data = _data(
        [_claim("holds", "fails", broke=True), {**_claim("holds", "could not run"), "id": "C2"}]
    )
    found = render.findings(data)
    assert [c for c, _ in found] == ["breaks", "error"]
    assert exit_for(found, {"breaks", "drift", "error"}) == 1


def test_a_mutant_our_code_raised_on_is_an_error_in_the_check_not_a_survivor():
    mutant = {"id": "auto.x.1", "line": 3, "diff": "", "status": "error", "reason": "pytest exit 4"}
    data = _data([_claim("holds", "holds")], [mutant])
    assert render.findings(data) == [
        (
            "error",
            "mutant auto.x.1 error in the check (gdn-review's fault, neither killed nor "
            "survived): pytest exit 4",
        )
    ]
    text = render.markdown(data)
    assert (
        "`auto.x.1`: error in the check" in text and "Lines no recorded claim protects" not in text
    )


def test_the_guard_report_lists_an_error_apart_from_the_survivors():
    entry = {
        "id": "auto.x.y.1",
        "line": 3,
        "function": "f",
        "status": "error",
        "reason": "does not compile: line 3: invalid syntax",
        "diff": "- a\n+ b\n",
    }
    data = {
        "target": "x.py",
        "release": "0.33.0",
        "records": ["#1"],
        "score": {"counts": {"error": 1}, "scored": 0, "detected": 0, "percent": None},
        "mutants": [entry],
        "lines": [],
        "notes": [],
        "settings": {"jobs": 1, "baseline_s": 1.0},
        "duration_s": 1.0,
        "finished_at": "t",
    }
    text = guard_report.markdown(data)
    assert "| error in the check | 1 |" in text
    survivors = text.split("## Survivors (")[1].split("## ")[0]
    assert survivors.startswith("0)") and "auto.x.y.1" not in survivors
    errors = text.split("## Errors in the check (")[1].split("## ")[0]
    assert errors.startswith("1)") and "auto.x.y.1" in errors and "gdn-review bug" in errors
