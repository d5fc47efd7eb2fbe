"""Risk reports: goldens on fixed evidence, verdict rules, valid markdown tables, CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import fail_conditions, interrupts
from gdn_review.common.vocabulary import Outcome
from gdn_review.kb import load_kb, load_record
from gdn_review.report import report, verdicts
from gdn_review.run import evidence_file
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
GOLDEN_RECORD = GOLDEN / "kb" / "1.yaml"


def golden_reports(evidence_name: str, tmp_path: Path, fmt: str = "markdown") -> dict[str, str]:
    evidence = evidence_file.load([GOLDEN / "evidence" / evidence_name])
    written, _ = report.write_reports(load_kb(GOLDEN / "kb"), evidence, tmp_path, fmt)
    return {path.name: path.read_text(encoding="utf-8") for path in written}


@pytest.mark.parametrize(
    "evidence_name, folder, fmt",
    [
        ("run.json", "reports", "markdown"),
        ("run.json", "reports", "json"),
        ("deselected.json", "reports/deselected", "markdown"),
        ("mutation.json", "reports/mutation", "markdown"),
    ],
)
def test_reports_match_goldens(evidence_name, folder, fmt, tmp_path):
    for name, text in golden_reports(evidence_name, tmp_path, fmt).items():
        expected = (GOLDEN / folder / name).read_text(encoding="utf-8")
        assert text == expected, (
            f"{folder}/{name} differs; after an intended change run scripts/regenerate-goldens"
        )


def test_verdicts_of_the_golden_run(tmp_path):
    data = report.report_data(
        load_record(GOLDEN_RECORD), evidence_file.load([GOLDEN / "evidence" / "run.json"])
    )
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts == {
        "C1": "holds",
        "C2.equal-rows": "fails",
        "C3": "known deviation",
        "C4": "holds",
    }
    # gpu_sync on CPU: its proxy ran and says so; CUDA's count, the authority, did not run.
    reason = next(c["reason"] for c in data["claims"] if c["id"] == "C4")
    assert "CPU proxy: device-origin reads" in reason and "needs CUDA" in reason
    coverage = {r["id"]: r["coverage"] for r in data["risks"]}
    assert coverage == {"R1": "passing", "R2": "passing", "R3": "uncovered"}
    assert any(step.startswith("Risk R3 is uncovered") for step in data["next_steps"])
    assert any(step.startswith("Claim C2.equal-rows fails") for step in data["next_steps"])


def test_killed_mutants_make_a_passing_risk_mutation_verified():
    data = report.report_data(
        load_record(GOLDEN_RECORD), evidence_file.load([GOLDEN / "evidence" / "mutation.json"])
    )
    coverage = {r["id"]: r["coverage"] for r in data["risks"]}
    # R1: passing tests and its one applicable mutant killed; R2: passing tests, but its one
    # applicable mutant runs on a line no test executes.
    assert coverage == {"R1": "mutation-verified", "R2": "not protected", "R3": "uncovered"}
    assert [m["id"] for m in data["mutation"]["missing_tests"]] == [
        "auto.drop_clause1.use_spec_decode.d6fb08",
        "auto.gt_to_ge.n.7c01d2",
    ]
    r1 = next(r for r in data["mutation"]["risks"] if r["id"] == "R1")
    assert r1["mutants"][0]["cells"] == ["killed", "·", "passed", "·"]
    found = verdicts.findings([data])
    assert fail_conditions.tripped(found, {"survived"}) == [
        "survived: PR #1 mutant auto.drop_clause1.use_spec_decode.d6fb08",
        "survived: PR #1 mutant auto.plus_one.rows.5e2a1c (not reached)",
        "survived: PR #1 mutant auto.gt_to_ge.n.7c01d2 (not reached)",
    ]
    assert fail_conditions.tripped(found, {"fails"}) == ["fails: PR #1 claim C2.equal-rows"]


def _edited_mutation_evidence(tmp_path, edit) -> dict:
    evidence = json.loads((GOLDEN / "evidence" / "mutation.json").read_text(encoding="utf-8"))
    edit(evidence["mutation"]["mutants"])
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence), encoding="utf-8")
    return report.report_data(load_record(GOLDEN_RECORD), evidence_file.load([path]))


def test_a_risk_whose_mutants_survive_reads_not_protected_never_passing(tmp_path):
    # R1's tests all pass; its one mutant survived them. This read "passing" before.
    data = _edited_mutation_evidence(
        tmp_path, lambda mutants: mutants[0].update(status="survived", killed_by={})
    )
    r1 = next(r for r in data["risks"] if r["id"] == "R1")
    assert (r1["coverage"], r1["coverage_note"]) == ("not protected", "1 of 1 mutant survived")
    assert "mutant m1 survived" in r1["missing"]
    assert data["coverage_counts"]["passing"] == 0 and data["coverage_counts"]["not protected"] == 2
    step = next(s for s in data["next_steps"] if s.startswith("Risk R1"))
    assert step.startswith(
        "Risk R1 is not protected: 1 of 1 mutant survived; its tests pass with the bug planted."
    )
    row = next(
        line for line in report.render_markdown(data).splitlines() if line.startswith("| R1 |")
    )
    assert "| **not protected**: 1 of 1 mutant survived |" in row and "passing" not in row


def test_not_protected_counts_the_survivors_among_the_applicable_mutants(tmp_path):
    def edit(mutants):
        killed, _, unreached = mutants[0], mutants[1], mutants[2]
        for index, status in enumerate(
            ["killed", "survived", "not reached", "survived", "equivalent"]
        ):
            mutants.append(
                {
                    **(unreached if status == "not reached" else killed),
                    "id": f"r1.{index}",
                    "risks": ["R1"],
                    "status": status,
                    "killed_by": killed["killed_by"] if status == "killed" else {},
                }
            )

    data = _edited_mutation_evidence(tmp_path, edit)
    r1 = next(r for r in data["risks"] if r["id"] == "R1")
    # m1 and r1.0 killed, r1.1 and r1.3 survived, r1.2 not reached; r1.4 equivalent does not count.
    assert (r1["coverage"], r1["coverage_note"]) == (
        "not protected",
        "3 of 5 mutants survived (1 not reached)",
    )
    assert (
        "mutant r1.2 not reached: no test executes line 9 of "
        "Builder._stage_decode: add a case that reaches it" in r1["missing"]
    )


def test_malformed_mutation_evidence_is_bad_input(tmp_path):
    evidence = json.loads((GOLDEN / "evidence" / "mutation.json").read_text(encoding="utf-8"))
    evidence["mutation"]["mutants"][1]["status"] = "zapped"
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence), encoding="utf-8")
    with pytest.raises(
        evidence_file.EvidenceError, match=r"mutation.mutants\[1\]: unknown status 'zapped'"
    ):
        evidence_file.load([path])


def test_deselected_claim_is_unverified_not_holds():
    data = report.report_data(
        load_record(GOLDEN_RECORD), evidence_file.load([GOLDEN / "evidence" / "deselected.json"])
    )
    c1 = next(c for c in data["claims"] if c["id"] == "C1")
    assert (c1["verdict"], c1["reason"]) == ("unverified", "not run: deselected")
    r1 = next(r for r in data["risks"] if r["id"] == "R1")
    assert r1["coverage"] == "targeted" and "2 tests not run" in r1["missing"]


@pytest.mark.parametrize("outcome", [Outcome.COULD_NOT_RUN, Outcome.CHECK_ERROR])
def test_a_test_that_measured_nothing_is_no_verdict_and_no_passing_risk(tmp_path, outcome):
    """One passing test of R1 in the golden run turned into one that could not run (or whose
    check raised): its claim reads so, R1 is no longer passing, the next step says what to fix,
    the summary line counts it apart, and --fail-on error exits 3."""
    evidence = json.loads((GOLDEN / "evidence" / "run.json").read_text(encoding="utf-8"))
    test = next(
        t for t in evidence["tests"] if "R1" in t.get("risks", []) and t["outcome"] == "passed"
    )
    test.update(outcome=outcome, reason=f"{outcome}: VllmConfig raised RuntimeError: no (at x)")
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence), encoding="utf-8")
    data = report.report_data(load_record(GOLDEN_RECORD), evidence_file.load([path]))
    claim = next(c for c in data["claims"] if c["id"] == test["claim"])
    assert (
        claim["verdict"] == outcome
        and "VllmConfig raised RuntimeError: no (at x)" in claim["reason"]
    )
    r1 = next(r for r in data["risks"] if r["id"] == "R1")
    assert r1["coverage"] == "targeted", r1
    assert any(outcome.split()[0] in m for m in r1["missing"]), r1["missing"]
    step = next(s for s in data["next_steps"] if s.startswith(f"Claim {claim['id']}"))
    assert ("fix the set-up" if outcome == Outcome.COULD_NOT_RUN else "report it") in step
    assert "Fix the code" not in step
    assert f"1 {outcome}" in report.summary_lines([data])[0]
    found = verdicts.findings([data])
    tripped = fail_conditions.tripped(found, {"error"})
    assert fail_conditions.exit_code(tripped) == 3


def test_a_hostile_message_that_could_not_run_stays_inside_its_cell(tmp_path):
    """A set-up error's message can come from a PR's diff applied by review (its code raises
    it): markdown in it (a pipe, a newline, a heading, HTML) never breaks the report's table."""
    evidence = json.loads((GOLDEN / "evidence" / "run.json").read_text(encoding="utf-8"))
    test = next(t for t in evidence["tests"] if t["outcome"] == "passed")
    hostile = "x | y\n# owned <img src=x onerror=alert(1)> [link](http://evil)"
    test.update(outcome=Outcome.COULD_NOT_RUN, reason=f"could not run: {hostile}")
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(evidence), encoding="utf-8")
    data = report.report_data(load_record(GOLDEN_RECORD), evidence_file.load([path]))
    text = report.render_markdown(data)
    assert "<img" not in text and "\n# owned" not in text
    row = next(line for line in text.splitlines() if line.startswith(f"| {test['claim']} |"))
    header = next(line for line in text.splitlines() if line.startswith("| claim |"))
    assert row.count(" | ") == header.count(" | ") and "x \\| y" in row, row


def test_partly_run_claim_is_unverified():
    claim = load_record(GOLDEN_RECORD).claims[0]
    tests = [
        {"nodeid": "a", "outcome": "passed", "case": "spec", "device": "cpu"},
        {
            "nodeid": "b",
            "outcome": "deselected",
            "case": "plain",
            "device": "cpu",
            "reason": "not run: deselected",
        },
    ]
    verdict, reason = verdicts.claim_verdict(claim, tests)
    assert verdict == "unverified" and reason.startswith("only 1 test ran (1 not run: deselected)")


def edited_evidence(tmp_path, edit) -> Path:
    data = json.loads((GOLDEN / "evidence" / "run.json").read_text())
    edit(data)
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(data))
    return path


def verdict_of(evidence_path, claim_id):
    data = report.report_data(load_record(GOLDEN_RECORD), evidence_file.load([evidence_path]))
    return next((c["verdict"], c["reason"]) for c in data["claims"] if c["id"] == claim_id)


def test_tests_missing_from_evidence_make_a_claim_unverified(tmp_path):
    # Only the C1 test ran (as when pytest is given one node id): C1 has no CUDA entry now.
    def keep_one(data):
        data["tests"] = [t for t in data["tests"] if t["claim"] == "C1" and t["device"] == "cpu"]

    verdict, reason = verdict_of(edited_evidence(tmp_path, keep_one), "C1")
    assert (
        verdict == "unverified"
        and reason == "only 1 test ran (1 not run: not collected); those that ran pass"
    )
    assert verdict_of(edited_evidence(tmp_path, keep_one), "C3") == (
        "unverified",
        "not run: not collected",
    )


def test_tests_that_never_ran_make_a_claim_unverified(tmp_path):
    def stop_early(data):
        for test in data["tests"]:
            if test["claim"] == "C3":
                test.update(outcome="not run", reason=None)

    verdict, reason = verdict_of(edited_evidence(tmp_path, stop_early), "C3")
    assert verdict == "unverified" and reason.startswith("not run: the session ended before it ran")


def test_out_of_range_release_is_not_applicable_even_with_cuda_skips(tmp_path):
    def old_release(data):
        for test in data["tests"]:
            if test["claim"] == "C1" and test["device"] == "cpu":
                test.update(
                    outcome="skipped",
                    reason="not applicable: claim C1 covers vLLM >=0.29; loaded 0.28.0",
                    measured=None,
                )

    assert verdict_of(edited_evidence(tmp_path, old_release), "C1") == (
        "not applicable",
        "not applicable: claim C1 covers vLLM >=0.29; loaded 0.28.0",
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t.pop("outcome"), "tests[0]: 'outcome' must be a string, got None"),
        (lambda t: t.update(outcome="great"), "tests[0]: unknown outcome 'great'"),
        (lambda t: t.update(risks="R1"), "tests[0]: 'risks' must be a list of ids, got 'R1'"),
        (lambda t: t.update(measured=[1]), "tests[0]: 'measured' must be an object, got [1]"),
        (
            lambda t: t.update(record="1"),
            "tests[0]: 'record' must be a PR number or a contract id, got '1'",
        ),
    ],
)
def test_malformed_evidence_entries_are_bad_input(tmp_path, edit, message):
    path = edited_evidence(tmp_path, lambda data: edit(data["tests"][0]))
    result = CliRunner().invoke(
        main,
        [
            "report",
            "--kb",
            str(GOLDEN / "kb"),
            "--evidence",
            str(path),
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 2 and message in result.output, result.output


def test_run_never_reports_stale_evidence(tmp_path, monkeypatch):
    from gdn_review.run import suite

    stale = tmp_path / "evidence.json"
    stale.write_text((GOLDEN / "evidence" / "run.json").read_text())
    monkeypatch.setattr(suite, "run_pytest", lambda command: 0)  # a pytest that writes no evidence
    result = CliRunner().invoke(
        main, ["run", "--evidence", str(stale), "--reports", str(tmp_path / "r")]
    )
    assert result.exit_code == 2 and f"pytest wrote no evidence at {stale}" in result.output


def test_claim_without_tests_is_unverified_and_risk_without_tests_uncovered():
    record = load_record(GOLDEN_RECORD)
    assert verdicts.claim_verdict(record.claims[0], [])[0] == "unverified"
    assert verdicts.risk_coverage(record.risks[2], [], has_tests=False)[0] == "uncovered"


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Tables as rows of cells; asserts the GFM shape (header, separator, equal cell counts)."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
            continue
        if current:
            rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in current]
            assert len(rows) >= 2 and all(re.fullmatch(r":?-{3,}:?", cell) for cell in rows[1]), (
                current[:2]
            )
            assert {len(row) for row in rows} == {len(rows[0])}, f"ragged table: {current}"
            tables.append([rows[0]] + rows[2:])
            current = []
    return tables


def test_markdown_tables_are_valid_and_render_as_tables(tmp_path):
    from markdown_it import MarkdownIt

    for name, text in golden_reports("run.json", tmp_path).items():
        tables = markdown_tables(text)
        rendered = MarkdownIt("commonmark").enable("table").render(text)
        assert rendered.count("<table>") == len(tables) > 0, name
    claims_table = markdown_tables(golden_reports("run.json", tmp_path)["1.md"])[1]
    assert [row[0] for row in claims_table[1:]] == ["C1", "C2.equal-rows", "C3", "C4"]


def test_report_cli_fail_on_and_step_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = [
        "report",
        "--kb",
        str(GOLDEN / "kb"),
        "--evidence",
        str(GOLDEN / "evidence" / "run.json"),
        "--out",
        str(tmp_path / "r"),
    ]
    runner = CliRunner()
    result = runner.invoke(main, base)
    assert result.exit_code == 1 and "fail-on: fails: PR #1 claim C2.equal-rows" in result.output
    assert "# PR #1:" in summary.read_text()
    assert runner.invoke(main, base + ["--fail-on", ""]).exit_code == 0
    result = runner.invoke(main, base + ["--fail-on", "uncovered"])
    assert result.exit_code == 1 and "fail-on: uncovered: PR #1 risk R3" in result.output
    assert runner.invoke(main, base + ["--fail-on", "everything"]).exit_code == 2


def test_report_cli_bad_evidence_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    result = CliRunner().invoke(
        main, ["report", "--kb", str(GOLDEN / "kb"), "--evidence", str(bad), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and f"{bad}: not gdn-review evidence" in result.output
    result = CliRunner().invoke(
        main, ["report", "--kb", str(GOLDEN / "kb"), "--evidence", str(tmp_path / "nope.json")]
    )
    assert result.exit_code == 2 and "no such evidence file" in result.output


def gdn_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    command = [
        sys.executable,
        "-m",
        "gdn_review.cli",
        "run",
        "--record",
        "52078",
        "--evidence",
        str(tmp_path / "evidence.json"),
        "--reports",
        str(tmp_path / "reports"),
        *args,
    ]
    done = interrupts.run_child(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    text = (
        (tmp_path / "reports" / "52078.md").read_text(encoding="utf-8")
        if (tmp_path / "reports" / "52078.md").exists()
        else ""
    )
    return done, text


@pytest.mark.slow
def test_run_writes_report_with_measured_op_counts_and_names_what_it_did_not_run(tmp_path):
    """One `gdn-review run` of #52078's module: C5 deselected, C1 on one case only (-k)."""
    done, text = gdn_run(tmp_path, "-k", "not C5 and (not C1 or pure_spec_decode)")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    claims = markdown_tables(text)[1]
    assert [row[0] for row in claims[1:]] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert all(
        re.match(r"\*\*(holds|known deviation|unverified|not applicable)\*\*", row[3])
        for row in claims[1:]
    )
    verdicts = {row[0]: row[3] for row in claims[1:]}
    assert verdicts["C5"] == "**unverified**: not run: deselected"
    assert verdicts["C1"].startswith("**unverified**: only 1 test ran (")
    assert verdicts["C3"].startswith(("**holds**", "**known deviation**"))
    release = json.loads((tmp_path / "evidence.json").read_text())["environment"]["vllm_version"]
    assert f"vLLM {release}" in text
    assert "| pure_spec_decode | cpu | passed | aten.ge: 1 | aten.ge: <= 1 |" in text
    assert (
        "| pure_spec_decode | cpu | passed | "
        "aten.bitwise_not\\|aten.logical_not: 1 | "
        "aten.bitwise_not\\|aten.logical_not: <= 1 |" in text
    )
    risks = markdown_tables(text)[-1]
    assert [row[0] for row in risks[1:]] == ["R1", "R2", "R3"]


def test_a_latency_claim_takes_its_verdict_from_bench_evidence(tmp_path):
    from gdn_review.kb import parse_record
    from tests.conftest import MINIMAL

    text = MINIMAL.replace(
        "    cases: [spec]\ncases:",
        "    cases: [spec]\n  - id: C9\n    text: Faster.\n    check:\n  "
        "    kind: latency\n      cases: [spec]\ncases:",
    )
    record = parse_record(text, "kb/7.yaml")
    result = {
        "base": "0.28.0",
        "head": "0.29.0",
        "device": "cpu",
        "verdict": "supported",
        "pooled": {"ratio": 0.96, "ci95": [0.95, 0.97]},
        "cases": [
            {
                "case": "spec",
                "base_median_us": 50.0,
                "head_median_us": 48.0,
                "ratio": 0.96,
                "ci95": [0.95, 0.97],
                "samples": [100, 100],
            }
        ],
    }
    path = tmp_path / "bench.json"
    path.write_text(
        json.dumps({"format": "gdn-review-evidence/1", "tests": [], "bench": {"7": result}}),
        encoding="utf-8",
    )
    data = report.report_data(record, evidence_file.load([path]))
    c9 = next(c for c in data["claims"] if c["id"] == "C9")
    assert c9["verdict"] == "holds" and c9["reason"].startswith(
        "supported: build() on 0.29.0 vs 0.28.0, head/base 0.960"
    )
    assert "serving benchmark" in c9["reason"] and c9["tests"][0]["label"] == "spec"
    for verdict, expected in (
        ("not distinguishable from noise", "unverified"),
        ("contradicted", "fails"),
    ):
        path.write_text(
            json.dumps(
                {
                    "format": "gdn-review-evidence/1",
                    "tests": [],
                    "bench": {"7": {**result, "verdict": verdict}},
                }
            ),
            encoding="utf-8",
        )
        assert (
            next(
                c
                for c in report.report_data(record, evidence_file.load([path]))["claims"]
                if c["id"] == "C9"
            )["verdict"]
            == expected
        )
    without = report.report_data(record, evidence_file.load([GOLDEN / "evidence" / "run.json"]))
    assert (
        next(c for c in without["claims"] if c["id"] == "C9")["reason"]
        == "not measured: run `gdn-review bench --record 7`"
    )


def test_a_gpu_run_merged_with_a_cpu_run_gives_verdicts_per_device(tmp_path):
    """Evidence of a GPU machine (a bundle's run) merged with this machine's: each device's verdict
    is shown."""
    from gdn_review.kb import load_kb

    cpu = json.loads((GOLDEN / "evidence" / "run.json").read_text(encoding="utf-8"))
    gpu = json.loads(json.dumps(cpu))
    gpu["environment"].update(
        cuda_available=True,
        cuda_device="NVIDIA H200",
        torch_version="2.11.0+cu130",
        vllm_target_device="cpu",
        cuda_on_cpu_platform=True,
    )
    for test in gpu["tests"]:
        if test["device"] == "cuda":
            test.update(outcome="passed", reason="")
    (tmp_path / "gpu.json").write_text(json.dumps(gpu), encoding="utf-8")
    (record,) = load_kb(GOLDEN / "kb").values()
    evidence = evidence_file.load([GOLDEN / "evidence" / "run.json", tmp_path / "gpu.json"])
    data = report.report_data(record, evidence)
    claims = {c["id"]: c for c in data["claims"]}
    assert claims["C1"]["by_device"] == {"cpu": "holds", "cuda": "holds"}
    assert (
        claims["C1"]["verdict"] == "holds" and "needs CUDA" not in claims["C1"]["reason"]
    )  # the CPU run's skips are superseded
    assert (
        claims["C2.equal-rows"]["devices"] == "cpu: fails; cuda: holds"
    )  # the GPU run passed what failed here
    assert any(
        "NVIDIA H200" in line and "CUDA tensors on vLLM's CPU platform" in line
        for line in data["environments"]
    )
    alone = {
        c["id"]: c
        for c in report.report_data(record, evidence_file.load([GOLDEN / "evidence" / "run.json"]))[
            "claims"
        ]
    }
    assert alone["C1"]["by_device"] == {"cpu": "holds", "cuda": "unverified"}


def test_latency_on_cuda_gives_the_claims_verdict_and_cpu_is_shown_beside_it(tmp_path):
    from gdn_review.kb import parse_record
    from tests.conftest import MINIMAL

    text = MINIMAL.replace(
        "    cases: [spec]\ncases:",
        "    cases: [spec]\n  - id: C9\n    text: Faster.\n    check:\n  "
        "    kind: latency\n      cases: [spec]\ncases:",
    )
    record = parse_record(text, "kb/7.yaml")
    row = {
        "case": "spec",
        "base_median_us": 50.0,
        "head_median_us": 48.0,
        "ratio": 0.96,
        "ci95": [0.95, 0.97],
        "samples": [100, 100],
    }
    cpu = {
        "base": "0.28.0",
        "head": "0.29.0",
        "device": "cpu",
        "verdict": "supported",
        "pooled": {"ratio": 0.96, "ci95": [0.95, 0.97]},
        "cases": [row],
    }
    cuda = {
        **cpu,
        "device": "cuda",
        "verdict": "not distinguishable from noise",
        "pooled": {"ratio": 0.999, "ci95": [0.99, 1.01]},
    }
    for name, result in (("cpu.json", cpu), ("cuda.json", cuda)):
        (tmp_path / name).write_text(
            json.dumps({"format": "gdn-review-evidence/1", "tests": [], "bench": {"7": result}}),
            encoding="utf-8",
        )
    data = report.report_data(
        record, evidence_file.load([tmp_path / "cpu.json", tmp_path / "cuda.json"])
    )
    c9 = next(c for c in data["claims"] if c["id"] == "C9")
    assert c9["verdict"] == "unverified" and c9["devices"] == "cuda: unverified; cpu: holds"
    assert c9["reason"].startswith(
        "not distinguishable from noise: build() on 0.29.0 vs 0.28.0, head/base 0.999"
    )
    assert "supported: build() on 0.29.0 vs 0.28.0, head/base 0.960" in c9["reason"]
    assert {t["device"] for t in c9["tests"]} == {"cpu", "cuda"}
