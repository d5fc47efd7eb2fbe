"""Records of open PRs: pending claims, the PR's diff as the head side, review with its own record,
evidence that accumulates."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import fail_conditions, interrupts, release_trees
from gdn_review.kb import load_record
from gdn_review.report.report_contents import report_data
from gdn_review.report.verdicts import findings
from gdn_review.review import render
from gdn_review.run import evidence_file
from tests.conftest import MINIMAL, ROOT, in_process_pytest

TARGET = "vllm/v1/attention/backends/gdn_attn.py"
OPEN = (
    MINIMAL.replace("  head_release: 0.29.0\n", "")
    .replace('  merged_at: "2026-01-02 03:04"\n', "  state: open\n")
    .replace("    text: One ge per build.\n", "    text: One ge per build.\n    before: fails\n")
)


def written_evidence(path: Path, tests: list[dict], release: str = "0.33.0", **parts) -> Path:
    data = {
        "format": "gdn-review-evidence/1",
        "finished_at": "2026-12-01T10:00:00+00:00",
        "environment": {"vllm_version": release, "vllm_source": "installed distribution"},
        "tests": tests,
        **parts,
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def c1_test(outcome: str, reason: str | None = None) -> dict:
    return {
        "nodeid": "gen/test_pr_7.py::test_C1_op_budget[cpu-spec]",
        "record": 7,
        "claim": "C1",
        "risks": ["R1"],
        "case": "spec",
        "device": "cpu",
        "outcome": outcome,
        "reason": reason,
    }


def test_an_open_prs_improvement_claim_that_fails_is_pending_and_passes_the_run(
    write_record, tmp_path
):
    record = load_record(write_record(OPEN) / "7.yaml")
    data = report_data(
        record,
        evidence_file.load(
            [written_evidence(tmp_path / "e.json", [c1_test("failed", "aten.ge: 2 > 1")])]
        ),
    )
    claim = data["claims"][0]
    assert claim["verdict"] == "pending"
    assert "fails on vLLM 0.33.0 as the PR says it should" in claim["reason"]
    assert data["state"] == "open" and "no release" in data["head_release"]
    assert fail_conditions.tripped(findings([data]), {"fails"}) == []  # exit 0 ...
    assert fail_conditions.tripped(findings([data]), {"fails", "pending"}) == [
        "pending: PR #7 claim C1: " + claim["reason"]
    ]  # ... unless --fail-on pending
    risk = data["risks"][0]
    assert (
        risk["coverage"] == "targeted" and "pending" in risk["missing"][0]
    )  # judged on what it can check now, and says so


def test_only_open_or_closed_prs_and_only_improvement_claims_are_pending(write_record, tmp_path):
    evidence = evidence_file.load(
        [written_evidence(tmp_path / "e.json", [c1_test("failed", "aten.ge: 2 > 1")])]
    )
    merged = load_record(
        write_record(
            MINIMAL.replace(
                "    text: One ge per build.\n", "    text: One ge per build.\n    before: fails\n"
            )
        )
        / "7.yaml"
    )
    assert report_data(merged, evidence)["claims"][0]["verdict"] == "fails"
    preservation = load_record(
        write_record(OPEN.replace("before: fails", "before: holds")) / "7.yaml"
    )
    assert report_data(preservation, evidence)["claims"][0]["verdict"] == "fails"
    closed = load_record(write_record(OPEN.replace("state: open", "state: closed")) / "7.yaml")
    data = report_data(closed, evidence)
    assert data["claims"][0]["verdict"] == "pending" and data["state"] == "closed, unmerged"
    open_record = load_record(write_record(OPEN) / "7.yaml")
    assert (
        report_data(open_record, evidence, with_change=True)["claims"][0]["verdict"] == "fails"
    )  # the diff applied: no excuse


NEEDS = "not applicable: vLLM 0.33.0 has no spec_decode_src_indices (metadata, builder, backend)"


@pytest.mark.parametrize(
    "kind, reason, verdict",
    [
        ("absent", NEEDS, "pending"),  # the release lacks what the case needs: the PR adds it
        # An adaptation the release refuses says "has no" too: never what the PR adds.
        (
            "refused",
            "not applicable: vLLM 0.34.0 has no model runner V1 (removed in 0.34.0)",
            "not applicable",
        ),
        (
            "not applicable",
            "not applicable: claim C1 covers vLLM >=0.34; loaded 0.33.0",
            "not applicable",
        ),
        ("needs CUDA", "needs CUDA: no CUDA device", "unverified"),
        ("other", "not applicable: vLLM 0.33.0 has no case spec", "unverified"),  # words alone
        # Formats 1 and 2 wrote no kind: the words they began a skip with name it, never absent.
        (None, NEEDS, "not applicable"),
    ],
)
def test_a_skip_reads_by_its_kind_never_by_its_words(write_record, tmp_path, kind, reason, verdict):
    record = load_record(write_record(OPEN.replace("before: fails", "before: holds")) / "7.yaml")
    skipped = {**c1_test("skipped", reason), **({"skip_kind": kind} if kind else {})}
    written = written_evidence(
        tmp_path / "e.json",
        [skipped],
        format=evidence_file.FORMAT if kind else "gdn-review-evidence/2",
    )
    claim = report_data(record, evidence_file.load([written]))["claims"][0]
    assert claim["verdict"] == verdict
    if verdict != "unverified":  # (unverified: the module's other tests were not collected)
        assert reason.split(": ", 1)[1] in claim["reason"]


def test_an_open_pr_with_a_head_release_is_a_record_error(write_record):
    from gdn_review.kb import RecordErrors

    with pytest.raises(RecordErrors, match="head_release"):
        load_record(
            write_record(
                OPEN.replace(
                    "  base_release: 0.28.0\n", "  base_release: 0.28.0\n  head_release: 0.29.0\n"
                )
            )
            / "7.yaml"
        )


def test_the_diff_side_reads_an_improvement_as_discriminating_and_no_change_as_preserved(
    write_record, tmp_path
):
    record = load_record(write_record(OPEN) / "7.yaml")
    side = {
        "7": {
            "release": "0.33.0",
            "diff": "kb/7.diff",
            "diff_sha256": "0" * 64,
            "finished_at": "2026-12-01T10:05:00Z",
            "claims": {
                "C1": {"verdict": "holds", "reason": "all tests pass", "measured": "aten.ge 1"}
            },
            "moved": 0,
            "unexplained": [],
        }
    }
    data = report_data(
        record,
        evidence_file.load(
            [
                written_evidence(
                    tmp_path / "e.json", [c1_test("failed", "aten.ge: 2 > 1")], diff=side
                )
            ]
        ),
    )
    row = data["diff_side"]["claims"][0]
    assert (row["on_release"], row["with_diff"], row["discrimination"]) == (
        "pending",
        "holds",
        "discriminates",
    )
    assert "with the PR's diff" in row["why"]
    assert any("the PR's diff" in part for part in data["parts"])
    for hostile in (
        {"claims": {"C1": {"verdict": "<b>great</b>"}}},
        {"moved": "**1**"},
        {"release": "0.33.0 [x](http://e.x)"},
        {"unexplained": [{"case": "a|b", "fields": ["x"]}]},
        {"finished_at": "<img src=x>"},
    ):
        bad = {"7": {**side["7"], **hostile}}
        with pytest.raises(Exception, match="diff.7"):
            evidence_file.load([written_evidence(tmp_path / "bad.json", [], diff=bad)])


def test_a_run_keeps_the_mutation_results_of_its_release_and_says_what_it_dropped(tmp_path):
    path = tmp_path / "evidence.json"
    mutation = {
        "format": "gdn-review-mutation/1",
        "finished_at": "2026-12-01T09:00:00Z",
        "records": {
            "7": {"release": "0.33.0", "gone_hunks": [], "notes": []},
            "8": {"release": "0.32.0", "gone_hunks": [], "notes": []},
        },
        "mutants": [
            {
                "record": 7,
                "id": "m1",
                "status": "killed",
                "risks": ["R1"],
                "killed_by": {"C1": ["t"]},
            },
            {"record": 8, "id": "m2", "status": "survived", "risks": [], "killed_by": {}},
        ],
    }
    written_evidence(path, [c1_test("passed")], mutation=mutation)
    kept = evidence_file.take_parts(path)
    written_evidence(path, [c1_test("passed")])  # what a new run writes: tests only
    lines = evidence_file.carry_over(path, kept)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data["mutation"]["records"]) == {"7"} and [
        m["id"] for m in data["mutation"]["mutants"]
    ] == ["m1"]
    assert any("kept the mutation results of 7" in line for line in lines)
    assert any(
        "dropped the mutation results of record 8" in line and "0.32.0" in line for line in lines
    )


def test_run_after_mutate_keeps_the_mutation_verdicts_in_the_report(write_record, tmp_path):
    record = load_record(write_record(MINIMAL) / "7.yaml")
    path = tmp_path / "evidence.json"
    mutation = {
        "format": "gdn-review-mutation/1",
        "finished_at": "2026-12-01T09:00:00Z",
        "records": {"7": {"release": "0.33.0", "gone_hunks": [], "notes": []}},
        "mutants": [
            {
                "record": 7,
                "id": "m1",
                "status": "killed",
                "risks": ["R1"],
                "killed_by": {"C1": ["t"]},
            }
        ],
    }
    tests = [
        c1_test("passed"),
        {
            **c1_test("skipped", "needs CUDA: no CUDA device"),
            "device": "cuda",
            "nodeid": "gen/test_pr_7.py::test_C1_op_budget[cuda-spec]",
        },
    ]
    written_evidence(path, tests, mutation=mutation)
    kept = evidence_file.take_parts(path)
    written_evidence(path, tests)
    evidence_file.carry_over(path, kept)
    data = report_data(record, evidence_file.load([path]))
    assert data["risks"][0]["coverage"] == "mutation-verified"
    assert any(
        part.startswith("mutants: 2026-12-01T09:00:00Z (vLLM 0.33.0) (1 h 0 min before the tests)")
        for part in data["parts"]
    )


def test_the_own_claims_line_counts_hold_pending_and_fail():
    data = {
        "onto": "0.33.0",
        "records": [
            {
                "number": 53542,
                "own": True,
                "claims": [
                    {"id": "C1", "after": "holds"},
                    {"id": "C2", "after": "not applicable"},
                    {"id": "C3", "after": "fails"},
                    {"id": "C4", "after": "known deviation"},
                ],
            }
        ],
    }
    assert (
        render.own_claims_line(data)
        == "**The PR's own claims** (#53542, with its diff onto 0.33.0): 2 "
        "hold, 1 pending, 1 fail (C3)."
    )
    assert (
        render.own_claims_line(
            {"onto": "0.33.0", "records": [{**data["records"][0], "own": False}]}
        )
        is None
    )
    with pytest.raises(ValueError):
        render.own_claims_line(
            {"onto": "0.33.0", "records": [{**data["records"][0], "number": "../kb"}]}
        )


def test_review_takes_the_pr_number_from_the_diffs_name_only_for_an_open_record(
    write_record, tmp_path
):
    from gdn_review.review import onto_release
    from gdn_review.review.review_files import ReviewError
    from gdn_review.run.selection import load_records

    kb = write_record(OPEN)
    records = load_records(kb)
    assert onto_release.own_record(None, Path("7.diff"), records) == 7
    assert onto_release.own_record(None, Path("pr-7.diff"), records) == 7
    assert onto_release.own_record(None, Path("change.diff"), records) is None
    merged = load_records(write_record(MINIMAL, "7.yaml"))
    assert onto_release.own_record(None, Path("7.diff"), merged) is None
    assert onto_release.own_record(7, Path("x.diff"), merged) == 7
    with pytest.raises(ReviewError, match="no record of PR #9"):
        onto_release.own_record(9, Path("x.diff"), merged)


# --- #55404 replayed as open: its own hunks (0.29.0 -> 0.30.0) are its diff --------------


def own_hunks_diff(base: str, head: str, anchor: str) -> str:
    """The hunks of the release step that hold ``anchor`` (the record's target.own_hunks line)."""
    a = (release_trees.entry(base).path / TARGET).read_text(encoding="utf-8").splitlines(True)
    b = (release_trees.entry(head).path / TARGET).read_text(encoding="utf-8").splitlines(True)
    lines = list(difflib.unified_diff(a, b, f"a/{TARGET}", f"b/{TARGET}"))
    hunks: list[list[str]] = []
    for line in lines[2:]:
        if line.startswith("@@"):
            hunks.append([])
        hunks[-1].append(line)
    mine = [h for h in hunks if any(anchor in line for line in h)]
    assert len(mine) == 1, "the record's own_hunks line names one hunk of the step"
    return "".join(lines[:2] + mine[0])


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """kb/55404.yaml as an open PR on 0.29.0 (no head release, C1 unranged) with its own hunks
    beside it."""
    root = tmp_path_factory.mktemp("open-55404")
    kb = root / "kb"
    (kb / "snapshots").mkdir(parents=True)
    shutil.copytree(ROOT / "kb" / "snapshots" / "55404", kb / "snapshots" / "55404")
    text = (ROOT / "kb" / "55404.yaml").read_text(encoding="utf-8")
    anchor = re.search(r'own_hunks:\n\s+- "(.+)"', text).group(1)
    text = text.replace("  head_release: 0.30.0\n", "").replace('    releases: ">=0.30"\n', "", 1)
    text = text.replace(
        '  title: "[Perf][GDN] Build cudagraph-capture metadata without a device sync"\n',
        '  title: "[Perf][GDN] Build cudagraph-capture metadata without '
        'a device sync"\n  state: open\n',
    )
    (kb / "55404.yaml").write_text(text, encoding="utf-8")
    (kb / "55404.diff").write_text(own_hunks_diff("0.29.0", "0.30.0", anchor), encoding="utf-8")
    env = release_trees.environment(release_trees.tree("0.29.0"))
    # Its own folder is a preload signature of its own: a server for it now, as each command here
    # and each command's pytest session would otherwise start as a fresh interpreter.
    interrupts.preload_server(env, str(root), now=True)

    def gdn(*args):
        return interrupts.run_child(
            [sys.executable, "-m", "gdn_review.cli", *map(str, args)],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )

    # Generating reads the record only (no vLLM): in this process, as on 0.29.0's PYTHONPATH.
    generated = CliRunner().invoke(main, ["generate", "--kb", str(kb), "--out", str(root / "gen")])
    assert generated.exit_code == 0, generated.output
    done = gdn(
        "run",
        "--kb",
        kb,
        "--generated",
        root / "gen",
        "--evidence",
        root / "evidence.json",
        "--reports",
        root / "reports",
        "--",
        "-q",
        "-p",
        "no:randomly",
    )
    return root, kb, done, gdn


@pytest.mark.slow
@pytest.mark.xdist_group("replay")  # one worker makes the replay once
def test_a_merged_pr_replayed_as_open_is_pending_on_its_base_and_holds_with_its_diff(replay):
    root, kb, done, _ = replay
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[diff] PR #55404: its diff" in done.stdout
    data = report_data(load_record(kb / "55404.yaml"), evidence_file.load([root / "evidence.json"]))
    verdicts = {c["id"]: c["verdict"] for c in data["claims"]}
    assert verdicts["C1"] == "pending" and "fails on vLLM 0.29.0" in data["claims"][0]["reason"]
    side = {row["id"]: row for row in data["diff_side"]["claims"]}
    assert (side["C1"]["on_release"], side["C1"]["with_diff"], side["C1"]["discrimination"]) == (
        "pending",
        "holds",
        "discriminates",
    )
    assert {side[c]["discrimination"] for c in ("C2", "C3", "C4")} == {"preserved"}
    assert data["diff_side"]["release"] == "0.29.0" and data["diff_side"]["unexplained"] == []
    report = (root / "reports" / "55404.md").read_text(encoding="utf-8")
    assert (
        "· **open** ·" in report
        and "None" not in report.split("## Related PRs")[0]
        and "TODO" not in report
    )


@pytest.mark.slow
@pytest.mark.xdist_group("replay")  # one worker makes the replay once
def test_review_of_the_open_prs_diff_with_its_record_explains_every_moved_field(replay):
    root, kb, _, gdn = replay
    done = gdn(
        "review",
        kb / "55404.diff",
        "--kb",
        kb,
        "--generated",
        root / "gen",
        "--onto",
        "0.29.0",
        "--max-mutants",
        "0",
        "--out",
        root / "review",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((root / "review" / "55404.json").read_text(encoding="utf-8"))
    (effect,) = data["records"]
    assert effect["own"] and effect["unexplained"] == []
    assert {c["id"]: c["after"] for c in effect["claims"]}["C1"] == "holds"
    markdown = (root / "review" / "55404.md").read_text(encoding="utf-8")
    assert (
        "**The PR's own claims** (#55404, with its diff onto 0.29.0): 4 hold, 0 pending, 0 fail."
        in markdown
    )


@pytest.mark.parametrize(
    "hostile",
    [
        "climb",  # a diff from a stranger that names a file outside the tree
        "link",  # kb/7.diff is a link to somewhere else
    ],
)
def test_a_hostile_diff_beside_an_open_record_stops_run_before_anything_runs(
    write_record, tmp_path, hostile
):
    kb = write_record(OPEN)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read\n", encoding="utf-8")
    if hostile == "climb":
        (kb / "7.diff").write_text(
            "--- a/../../secret.txt\n+++ b/../../secret.txt\n@@ -1 +1 @@\n-do not read\n+written\n",
            encoding="utf-8",
        )
    else:
        (kb / "7.diff").symlink_to(secret)
    generated = tmp_path / "gen"
    assert (
        CliRunner().invoke(main, ["generate", "--kb", str(kb), "--out", str(generated)]).exit_code
        == 0
    )
    evidence = tmp_path / "evidence.json"
    result = CliRunner().invoke(
        main,
        [
            "run",
            "--kb",
            str(kb),
            "--generated",
            str(generated),
            "--evidence",
            str(evidence),
            "--reports",
            str(tmp_path / "reports"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "7.diff" in result.output
    assert (
        not evidence.exists() and not (tmp_path / "reports").exists()
    )  # nothing ran, nothing written
    assert secret.read_text(encoding="utf-8") == "do not read\n"


@pytest.mark.slow
def test_the_open_records_of_the_kb_run_green_with_their_improvements_pending(
    tmp_path, monkeypatch
):
    """kb/53542.yaml, kb/51508.yaml and kb/40738.yaml on the installed vLLM: exit 0, improvement
    claims pending, the rest holding.

    kb/51508.yaml's C1 fails on 0.33.0 as the PR says it should: pytest sees an xfail (CI stays
    green), the evidence keeps the failure, the report says pending; where the PR's change is
    applied (the review's patched side), the failure counts.

    The three records run from a copy of kb/ and generated_tests/ holding them alone (their
    files, stored snapshots and generated modules, which `run` checks are current): the same
    run, without loading, checking and rendering the KB's other records.
    """
    records = ("53542", "51508", "40738")
    (tmp_path / "kb" / "snapshots").mkdir(parents=True)
    (tmp_path / "generated_tests").mkdir()
    for key in records:
        shutil.copy(ROOT / "kb" / f"{key}.yaml", tmp_path / "kb")
        if (ROOT / "kb" / "snapshots" / key).is_dir():
            shutil.copytree(ROOT / "kb" / "snapshots" / key, tmp_path / "kb" / "snapshots" / key)
        shutil.copy(ROOT / "generated_tests" / f"test_pr_{key}.py", tmp_path / "generated_tests")
    # A folder of its own is a preload signature of its own: a server for it now (the command and
    # its sessions would otherwise each start as a fresh interpreter).
    interrupts.preload_server(os.environ, str(tmp_path), now=True)
    done = interrupts.run_child(
        [
            sys.executable,
            "-m",
            "gdn_review.cli",
            "run",
            *(option for key in records for option in ("--record", key)),
            "--evidence",
            str(tmp_path / "evidence.json"),
            "--reports",
            str(tmp_path / "reports"),
            "--",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        "PR #51508: claims 2 holds, 1 pending" in done.stdout
        and "PR #53542: claims 3 holds, 2 pending" in done.stdout
    )
    assert "PR #40738: claims 2 holds, 1 pending" in done.stdout
    assert (
        "fails"
        not in (tmp_path / "reports" / "53542.md").read_text(encoding="utf-8").split("## Claims")[0]
    )
    # The report from that evidence (no vLLM, nothing of its own to isolate): in this process.
    failing = CliRunner().invoke(
        main,
        ["report", "--kb", str(tmp_path / "kb"), "--record", "53542"]
        + ["--evidence", str(tmp_path / "evidence.json"), "--out", str(tmp_path / "again")]
        + ["--fail-on", "fails,pending"],
    )
    assert failing.exit_code == 1, failing.output
    assert "pending: PR #53542 claim C1: " in failing.output
    (test,) = [
        t
        for t in json.loads((tmp_path / "evidence.json").read_text(encoding="utf-8"))["tests"]
        if t["record"] == 51508
        and t["claim"] == "C1"
        and t["device"] == "cpu"
        and t["boundary"] is None  # the random examples' test (the boundary batches: below)
    ]
    assert test["outcome"] == "failed" and "accepted counts outside 1..3" in test["reason"]
    assert "stale_zero_accept" in test["smallest_batch"]
    # Where the PR's change is applied (the plugin reads the variable as each test ends), C1's
    # failure counts: pytest on the generated module here, with this worker's vLLM.
    monkeypatch.setenv("GDN_REVIEW_CHANGE_APPLIED", "51508")
    code, printed = in_process_pytest(
        str(ROOT / "generated_tests" / "test_pr_51508.py"),
        "-q",
        "-k",
        "C1 and cpu",
        "--gdn-no-evidence",
    )
    assert code == 1, printed[-2000:]


def test_a_review_with_the_prs_own_record_reads_its_failing_claim_as_failing_not_pending(
    write_record, tmp_path
):
    """compare.record_effect: with its own diff applied, an open PR's improvement that still fails
    is a break."""
    from gdn_review.review import compare

    record = load_record(write_record(OPEN) / "7.yaml")
    sides = {}
    for side in ("unpatched", "patched"):
        folder = tmp_path / side
        folder.mkdir()
        written_evidence(folder / "evidence.json", [c1_test("failed", "aten.ge: 2 > 1")])
        sides[side] = {"status": "ran", "evidence": "evidence.json", "folder": str(folder)}
    own = compare.record_effect(record, sides, "0.33.0", "0.34.0", set(), own=True)["claims"][0]
    assert (own["before"], own["after"], own["broke"]) == ("pending", "fails", True)
    assert own["failing_after"][0]["case"] == "spec"
    other = compare.record_effect(record, sides, "0.33.0", "0.34.0", set(), own=False)["claims"][0]
    assert (other["before"], other["after"], other["broke"]) == ("pending", "pending", False)


def test_the_prs_own_diff_explains_the_fields_its_record_says_it_changes_and_no_others(
    write_record,
):
    from gdn_review.matrix.matrix_report import drift_data

    text = OPEN.replace(
        "  base_release: 0.28.0\n",
        "  base_release: 0.28.0\n  changes:\n    - {cases: [spec], "
        "fields: [num_accepted_tokens]}\n",
    )
    record = load_record(write_record(text) / "7.yaml")
    before = {"cases": {"spec": {"num_accepted_tokens": [1, 1], "num_spec_decodes": 2}}}
    stated = {"cases": {"spec": {"num_accepted_tokens": [2, 2], "num_spec_decodes": 2}}}
    other = {"cases": {"spec": {"num_accepted_tokens": [1, 1], "num_spec_decodes": 3}}}
    assert (
        drift_data(record, [("0.28.0", before), ("0.29.0", stated)], set(), own_change=True)[
            "unexplained"
        ]
        == []
    )
    assert drift_data(record, [("0.28.0", before), ("0.29.0", stated)], set())[
        "unexplained"
    ]  # not its own diff: unexplained
    assert drift_data(record, [("0.28.0", before), ("0.29.0", other)], set(), own_change=True)[
        "unexplained"
    ]
    # A case's expect that the new value meets explains the move too.
    row = "      - {seq_len: 12, query_len: 3, drafted: 2}\n"
    assert row in OPEN
    expecting = load_record(
        write_record(OPEN.replace(row, row + "    expect: {num_spec_decodes: 3}\n")) / "7.yaml"
    )
    assert (
        drift_data(expecting, [("0.28.0", before), ("0.29.0", other)], set(), own_change=True)[
            "unexplained"
        ]
        == []
    )
